// A JavaScript capsule for the component tests (host TestLoadJSComponent,
// TestJSContract): componentize-js turns it into a component against the
// repo's wit/ (world capsule:guest/capsule), and the host runs it with no
// adapter of its own. Tools: echo, run (spawn, ephemeral), persist
// (spawn-persistent, wait, read-since, release), fail (a tool error),
// trap, wasi (clocks, random, console: the WASI build only), and do,
// which runs a script of capsule:process@1.1.0 calls so
// that a Go table test drives every function and handle method through
// the bindings componentize-js generated.
import {
  spawn, spawnBackground, spawnPersistent, attach, listProcesses, status, statusMany,
  readSince, readLogs, writeStdin, closeStdin, signal, wait, stop, release, pollEvents,
} from 'capsule:process/host@1.1.0';

const schema = '{"type":"object"}';
const text = (b) => new TextDecoder().decode(b);
const bytes = (s) => new TextEncoder().encode(s);

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

// The script of `do`: JSON arguments become the WIT values the bindings
// take (u64 as BigInt, list<u8> from a string, option as undefined),
// and results become JSON (BigInt as a number, list<u8> as text).
const u64 = (n) => BigInt(n);
const opt = (f) => (v) => (v === undefined || v === null ? undefined : f(v));
const same = (v) => v;

function spawnRequest(r) {
  return {
    cmd: r.cmd, args: r.args ?? [], stdin: opt(bytes)(r.stdin),
    env: (r.env ?? []).map(([key, value]) => ({ key, value })),
    cwd: opt(same)(r.cwd), timeoutMs: opt(u64)(r.timeoutMs),
  };
}

function persistOptions(o) {
  o = o ?? {};
  const l = o.limits ?? {};
  return {
    label: opt(same)(o.label), keepStdinOpen: o.keepStdinOpen ?? false, overflow: o.overflow ?? 'drop-oldest',
    logRingBytes: opt(same)(o.logRingBytes), maxLifetimeMs: opt(u64)(o.maxLifetimeMs),
    idleTimeoutMs: opt(u64)(o.idleTimeoutMs), exitRetentionMs: opt(u64)(o.exitRetentionMs),
    limits: {
      maxMemoryBytes: opt(u64)(l.maxMemoryBytes), maxCpuMs: opt(u64)(l.maxCpuMs),
      maxPids: opt(same)(l.maxPids), maxOpenFiles: opt(same)(l.maxOpenFiles),
    },
  };
}

// funcs: each function with its argument conversions.
const funcs = {
  'spawn': [spawn, [spawnRequest]],
  'spawn-background': [spawnBackground, [spawnRequest]],
  'spawn-persistent': [spawnPersistent, [spawnRequest, persistOptions]],
  'attach': [attach, [same]],
  'list-processes': [listProcesses, [opt(same)]],
  'status': [status, [same]],
  'status-many': [statusMany, [same]],
  'read-since': [readSince, [same, same, opt(same), same]],
  'read-logs': [readLogs, [same]],
  'write-stdin': [writeStdin, [same, bytes]],
  'close-stdin': [closeStdin, [same]],
  'signal': [signal, [same, same]],
  'wait': [wait, [same, u64]],
  'stop': [stop, [same, opt(u64)]],
  'release': [release, [same]],
  'poll-events': [pollEvents, [u64, same, u64]],
};

// methods of process-handle, by WIT name.
const methods = {
  'read-logs': ['readLogs', []],
  'write-stdin': ['writeStdin', [bytes]],
  'close-stdin': ['closeStdin', []],
  'signal': ['signal', [same]],
  'kill': ['kill', []],
  'wait': ['wait', [opt(u64)]],
  'wait-with-output': ['waitWithOutput', [opt(u64)]],
  'os-pid': ['osPid', []],
};

const dispose = Symbol.dispose ?? Symbol.for('dispose');

function toJSON(v) {
  if (typeof v === 'bigint') return Number(v);
  if (ArrayBuffer.isView(v)) return text(v);
  if (Array.isArray(v)) return v.map(toJSON);
  if (v && typeof v === 'object') {
    if (typeof v[dispose] === 'function') return '<handle>';
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = toJSON(x);
    return out;
  }
  return v === undefined ? null : v;
}

// run executes one step: {fn, args, as} or {fn: "NAME.METHOD", args}
// on a handle saved `as` NAME, or {fn: "NAME.drop"}. A string argument
// "$NAME" is the result saved as NAME (a process ID).
function run(st, vars) {
  const args = (st.args ?? []).map((a) => (typeof a === 'string' && a.startsWith('$') ? vars[a.slice(1)] : a));
  const dot = st.fn.indexOf('.');
  let out;
  if (dot > 0) {
    const h = vars[st.fn.slice(0, dot)];
    const m = st.fn.slice(dot + 1);
    if (m === 'drop') {
      h[dispose]();
      out = undefined;
    } else {
      const [name, conv] = methods[m] ?? [];
      if (!name) throw `unknown method ${m}`;
      out = h[name](...conv.map((c, i) => c(args[i])));
    }
  } else {
    const [fn, conv] = funcs[st.fn] ?? [];
    if (!fn) throw `unknown function ${st.fn}`;
    out = fn(...conv.map((c, i) => c(args[i])));
  }
  if (st.as) vars[st.as] = out;
  return out;
}

// script runs every step, recording {ok} or {err: {tag, val}}; a thrown
// value that is not an error-code ends the call as a tool error.
function script(args) {
  const vars = {};
  const results = [];
  for (const st of args.steps ?? []) {
    try {
      results.push({ ok: toJSON(run(st, vars)) });
    } catch (e) {
      if (!e || e.payload === undefined) throw `${st.fn}: ${errorText(e)}`;
      results.push({ err: toJSON(e.payload) });
    }
  }
  return JSON.stringify(results);
}

const tools = {
  echo: (args, input) => input,
  run: (args) => {
    const r = step('spawn', () => spawn(request(args)));
    return JSON.stringify({ stdout: text(r.stdout), exit: r.exit.exitCode ?? null });
  },
  persist: (args) => {
    const id = step('spawn-persistent', () => spawnPersistent(request(args), persistOptions({ label: 'js' })));
    const exit = step('wait', () => wait(id, 10000n));
    const chunk = step('read-since', () => readSince(id, 'stdout', undefined, 65536));
    step('release', () => release(id));
    return JSON.stringify({ id, stdout: text(chunk.data), eof: chunk.eof, exit: exit.exitCode ?? null });
  },
  do: script,
  // wasi needs the WASI build (clocks, random, stdio through wasip2).
  wasi: () => {
    const hex = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
    console.log('wasi tool: hello from js');
    return JSON.stringify({ now: Date.now(), random: hex(), again: hex() });
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
