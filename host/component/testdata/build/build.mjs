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
// WITDIR is the repo's wit/ (one folder per package). jco's witPath
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
// follow it nested.
async function witSource(dir, world) {
  const main = world.split('/')[0];
  let head = '';
  const nested = [];
  for (const pkg of (await readdir(dir, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort()) {
    for (const f of (await readdir(join(dir, pkg))).filter((f) => f.endsWith('.wit')).sort()) {
      const text = await readFile(join(dir, pkg, f), 'utf8');
      const m = text.match(/^package\s+([^;\s]+)\s*;/m);
      if (!m) throw new Error(`${pkg}/${f}: no package declaration`);
      if (m[1].split('@')[0] === main && !head) head = text;
      else nested.push(`package ${m[1]} {\n${text.replace(m[0], '')}\n}\n`);
    }
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
