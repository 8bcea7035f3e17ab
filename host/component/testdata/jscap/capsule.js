// A JavaScript capsule for the component tests (host TestLoadJSComponent):
// componentize-js turns it into a component against the repo's wit/
// (world capsule:guest/capsule), and the host runs it with no adapter of
// its own. Tools: echo, run (spawn, ephemeral), persist (spawn-persistent,
// wait, read-since, release), fail (a tool error) and trap.
import { spawn, spawnPersistent, wait, readSince, release } from 'capsule:process/host@1.1.0';

const schema = '{"type":"object"}';
const text = (b) => new TextDecoder().decode(b);

function request(args) {
  return { cmd: args.cmd, args: args.args ?? [], stdin: undefined, env: [], cwd: undefined, timeoutMs: undefined };
}

// errorText turns an imported function's error-code (thrown with its
// payload by the bindings) or any other error into a message.
function errorText(e) {
  if (e && e.payload !== undefined) {
    return JSON.stringify(e.payload, (k, v) => (typeof v === 'bigint' ? v.toString() : v));
  }
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

// step runs one import call, naming it in the error.
function step(name, fn) {
  try {
    return fn();
  } catch (e) {
    throw `${name}: ${errorText(e)}`;
  }
}

const tools = {
  echo: (args, input) => input,
  run: (args) => {
    const r = step('spawn', () => spawn(request(args)));
    return JSON.stringify({ stdout: text(r.stdout), exit: r.exit.exitCode ?? null });
  },
  persist: (args) => {
    const limits = { maxMemoryBytes: undefined, maxCpuMs: undefined, maxPids: undefined, maxOpenFiles: undefined };
    const opts = {
      label: 'js', keepStdinOpen: false, overflow: 'drop-oldest', logRingBytes: undefined,
      maxLifetimeMs: undefined, idleTimeoutMs: undefined, exitRetentionMs: undefined, limits,
    };
    const id = step('spawn-persistent', () => spawnPersistent(request(args), opts));
    const exit = step('wait', () => wait(id, 10000n));
    const chunk = step('read-since', () => readSince(id, 'stdout', undefined, 65536));
    step('release', () => release(id));
    return JSON.stringify({ id, stdout: text(chunk.data), eof: chunk.eof, exit: exit.exitCode ?? null });
  },
  fail: () => { throw 'failed on purpose'; },
  trap: () => { throw new RangeError('not a tool error'); },
};

export const tool = {
  describe() {
    return Object.keys(tools).map((name) => ({ name, description: `js ${name}`, inputSchema: schema }));
  },
  call(name, input) {
    const fn = tools[name];
    if (!fn) throw `unknown tool ${name}`;
    return fn(JSON.parse(input), input);
  },
};
