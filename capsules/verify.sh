#!/usr/bin/env bash
# Checks that every committed capsule .wasm is byte-identical to a fresh
# reproducible build of its sources, and that Capsule.toml pins its sha256.
# Exits nonzero, naming each capsule that differs and why.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
gover="$(GOTOOLCHAIN=local $GO env GOVERSION)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fail=0
for m in capsules/*/Capsule.toml; do
  dir="$(dirname "$m")"
  name="$(basename "$dir")"
  mod="$(sed -n 's/^module[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$m" | head -n1)"
  committed="$dir/$mod"
  pinned="$(sed -n 's/^sha256[[:space:]]*=[[:space:]]*"\([0-9a-f]*\)".*/\1/p' "$m" | head -n1)"
  built_with="$(sed -n 's/^# toolchain: //p' "$m" | head -n1)"
  if [ ! -f "$committed" ]; then
    echo "verify: $name: $committed is missing; run capsules/build.sh $name" >&2
    fail=1
    continue
  fi
  OUT="$tmp" "$root/capsules/build.sh" "$name"
  fresh="$tmp/$name.wasm"
  have="$(sha256sum "$committed" | cut -d' ' -f1)"
  want="$(sha256sum "$fresh" | cut -d' ' -f1)"
  if [ "$have" != "$pinned" ]; then
    echo "verify: $name: $m pins sha256 $pinned but $committed has $have; run capsules/build.sh $name" >&2
    fail=1
  fi
  if ! cmp -s "$committed" "$fresh"; then
    echo "verify: $name: $committed (sha256 $have) differs from a fresh build of $dir (sha256 $want)." >&2
    if [ -n "$built_with" ] && [ "$built_with" != "$gover" ]; then
      echo "verify: $name: it was built with $built_with, this toolchain is $gover: builds are only reproducible with the same Go version." >&2
    else
      echo "verify: $name: the sources changed since the last build: run capsules/build.sh $name and commit the .wasm and Capsule.toml." >&2
    fi
    fail=1
    continue
  fi
  echo "verify: $name: ok ($have)"
done
exit $fail
