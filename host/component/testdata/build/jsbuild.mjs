// Builds a JavaScript capsule with componentize-js (the pinned
// package-lock.json) against a WIT directory as `capsule-host wit --out`
// writes it (the world's package at the top, the others under deps/),
// read as-is: every JS build is also the check that that layout is one
// componentize-js accepts.
//
// usage: node jsbuild.mjs WITDIR WORLD IN.js OUT.wasm [--wasi]
//
// Without --wasi every optional WASI feature of componentize-js is
// disabled (random, stdio, clocks, http, fetch-event). With --wasi, the
// default features stdio, random and clocks are on; http and
// fetch-event stay off: the host serves no wasi:http (such a component
// is refused at load naming the import).
import { readFile, writeFile } from 'node:fs/promises';
import { componentize } from '@bytecodealliance/componentize-js';

const [dir, world, input, output, flag] = process.argv.slice(2);
if (!output) {
  console.error('usage: node jsbuild.mjs WITDIR WORLD IN.js OUT.wasm [--wasi]');
  process.exit(2);
}
const source = await readFile(input, 'utf8');
const disableFeatures = flag === '--wasi' ? ['http', 'fetch-event'] : ['random', 'stdio', 'clocks', 'http', 'fetch-event'];
const { component } = await componentize(source, { witPath: dir, worldName: world.split('/')[1], disableFeatures });
await writeFile(output, component);
