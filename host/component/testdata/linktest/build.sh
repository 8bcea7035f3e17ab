#!/bin/sh
# Rebuilds linktest.wasm (committed, 1 KB): wat2wasm, then jco's
# componentEmbed + componentNew with no adapter (the pinned jco in ../build).
set -e
cd "$(dirname "$0")"
wat2wasm core.wat -o /tmp/linktest-core.wasm
node ../build/build.mjs "$PWD/wit" test:comp/w /tmp/linktest-core.wasm "$PWD/linktest.wasm" --no-adapter
