// Builds a JavaScript capsule with componentize-js (the pinned
// package-lock.json) against the repo's wit/: the world's package at the
// top of a temporary WIT directory, the other packages under deps/, the
// layout wit-parser reads.
//
// usage: node jsbuild.mjs WITDIR WORLD IN.js OUT.wasm [--wasi]
//
// Without --wasi every optional WASI feature of componentize-js is
// disabled (random, stdio, clocks, http, fetch-event).
import { mkdtemp, readdir, readFile, writeFile, mkdir, copyFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { componentize } from '@bytecodealliance/componentize-js';

const [witDir, world, input, output, flag] = process.argv.slice(2);
if (!output) {
  console.error('usage: node jsbuild.mjs WITDIR WORLD IN.js OUT.wasm [--wasi]');
  process.exit(2);
}
const main = world.split('/')[0];
const dir = await mkdtemp(join(tmpdir(), 'jscap-wit-'));
try {
  for (const pkg of (await readdir(witDir, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name)) {
    for (const f of (await readdir(join(witDir, pkg))).filter((f) => f.endsWith('.wit'))) {
      const text = await readFile(join(witDir, pkg, f), 'utf8');
      const m = text.match(/^package\s+([^;\s]+)\s*;/m);
      if (m && m[1].split('@')[0] === main) {
        await copyFile(join(witDir, pkg, f), join(dir, f));
      } else {
        await mkdir(join(dir, 'deps', pkg), { recursive: true });
        await copyFile(join(witDir, pkg, f), join(dir, 'deps', pkg, f));
      }
    }
  }
  const source = await readFile(input, 'utf8');
  const disableFeatures = flag === '--wasi' ? [] : ['random', 'stdio', 'clocks', 'http', 'fetch-event'];
  const { component } = await componentize(source, { witPath: dir, worldName: world.split('/')[1], disableFeatures });
  await writeFile(output, component);
} finally {
  await rm(dir, { recursive: true, force: true });
}
