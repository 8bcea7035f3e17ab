// Wraps core capsules into components with jco's Node API (the pinned
// package-lock.json), the way a user turns a wasip1 reactor into a
// component: componentEmbed (WIT world metadata) then componentNew with
// the wasi_snapshot_preview1 reactor adapter.
//
// usage: node build.mjs WITDIR WORLD IN.wasm OUT.wasm [--no-adapter]
//        node build.mjs WITDIR WORLD - OUT.wasm --dummy
//
// --dummy makes wit-component's dummy core module for the world (it
// imports every function of the world and traps in every export): a
// real component binary whose import types are exactly the WIT's, for
// the load-time type check.
//
// WITDIR is the repo's wit/ or a `capsule-host wit --out` directory. jco's witPath
// cannot read directories here (its WASI sandbox sees no files), so the
// packages go in as one witSource in WIT's nested `package x { ... }` form.
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { componentEmbed, componentNew, preview1AdapterReactorPath } from '@bytecodealliance/jco';

const [witDir, world, input, output, flag] = process.argv.slice(2);
if (!output) {
  console.error('usage: node build.mjs WITDIR WORLD IN.wasm|- OUT.wasm [--no-adapter|--dummy]');
  process.exit(2);
}

// The world's own package is the document's header package; the others
// follow it nested. WITDIR is either the repo's wit/ (one folder per
// package) or what `capsule-host wit --out` writes (the world's package
// at the top, every other package in a folder under deps/).
async function witFiles(dir) {
  const entries = await readdir(dir, { withFileTypes: true });
  const top = entries.filter((d) => d.isFile() && d.name.endsWith('.wit')).map((d) => join(dir, d.name)).sort();
  const dirs = [];
  for (const d of entries.filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
    if (d !== 'deps') { dirs.push(join(dir, d)); continue; }
    for (const dep of (await readdir(join(dir, d), { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name).sort()) {
      dirs.push(join(dir, d, dep));
    }
  }
  const files = [...top];
  for (const d of dirs) {
    files.push(...(await readdir(d)).filter((f) => f.endsWith('.wit')).sort().map((f) => join(d, f)));
  }
  return files;
}

// A world with a version (capsule:process/capsule-terminal@1.2.0) names
// its package's version too: the header is that version's package.
async function witSource(dir, world) {
  const [main, name] = world.split('/');
  const version = name.includes('@') ? name.split('@')[1] : '';
  const isHead = (pkg) => version ? pkg === `${main}@${version}` : pkg.split('@')[0] === main;
  let head = '';
  const nested = [];
  for (const f of await witFiles(dir)) {
    const text = await readFile(f, 'utf8');
    const m = text.match(/^package\s+([^;\s]+)\s*;/m);
    if (!m) throw new Error(`${f}: no package declaration`);
    if (isHead(m[1]) && !head) head = text;
    else nested.push(`package ${m[1]} {\n${text.replace(m[0], '')}\n}\n`);
  }
  if (!head) throw new Error(`no package ${main} in ${dir}`);
  return [head, ...nested].join('\n');
}

const dummy = flag === '--dummy';
const binary = dummy ? undefined : await readFile(input);
const embedded = await componentEmbed({ binary, dummy, witSource: await witSource(witDir, world), world });
const adapters = flag === '--no-adapter' || dummy ? [] :
  [['wasi_snapshot_preview1', await readFile(preview1AdapterReactorPath())]];
await writeFile(output, await componentNew(embedded, adapters));
