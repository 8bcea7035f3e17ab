#!/usr/bin/env bash
# Rebuilds every capsule under capsules/ reproducibly and pins its sha256.
#
#   capsules/build.sh [NAME...]        build all capsules, or the named ones
#   OUT=DIR capsules/build.sh [NAME..] write NAME.wasm into DIR instead, and
#                                      leave Capsule.toml alone (verify.sh)
#
# A capsule is a directory with a Capsule.toml and a Go main package. The
# build is a WASI preview1 reactor; the flags below make it byte-identical
# on any machine with the same Go toolchain:
#   -trimpath        no local file paths
#   -ldflags=-buildid=   no build ID (it hashes inputs incl. paths)
#   -buildvcs=false  no git revision/dirty flag (it changes every commit)
#   CGO_ENABLED=0, GOWASM=, GOEXPERIMENT=, GOFLAGS=-mod=readonly: no
#   ambient settings leak in.
# The toolchain version is embedded in the module; it is recorded as a
# comment in each Capsule.toml, and verify.sh names it on a mismatch.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

export GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOWASM= GOEXPERIMENT= GOFLAGS=-mod=readonly GOTOOLCHAIN=local
GO="${GO:-go}"
gover="$($GO env GOVERSION)"

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for m in capsules/*/Capsule.toml; do
    names+=("$(basename "$(dirname "$m")")")
  done
fi

# pin runs `capsule-host pin DIR` from this checkout, built once for this
# machine (not for wasip1) into a temporary directory.
pinbin=""
cleanup() { if [ -n "$pinbin" ]; then rm -rf "$(dirname "$pinbin")"; fi; }
trap cleanup EXIT
pin() {
  if [ -z "$pinbin" ]; then
    pinbin="$(mktemp -d)/capsule-host"
    GOOS= GOARCH= $GO build -o "$pinbin" ./cmd/capsule-host
  fi
  "$pinbin" pin "$1"
}

# module reads [capsule] module from a manifest.
module() {
  sed -n 's/^module[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$1" | head -n1
}

for name in "${names[@]}"; do
  dir="capsules/$name"
  manifest="$dir/Capsule.toml"
  [ -f "$manifest" ] || { echo "build.sh: $manifest not found" >&2; exit 1; }
  mod="$(module "$manifest")"
  [ -n "$mod" ] || { echo "build.sh: $manifest has no [capsule] module" >&2; exit 1; }
  if [ -n "${OUT:-}" ]; then
    out="$OUT/$name.wasm"
  else
    out="$dir/$mod"
  fi
  tmp="$(mktemp "${out}.XXXXXX")"
  if ! $GO build -buildmode=c-shared -trimpath -buildvcs=false -ldflags=-buildid= -o "$tmp" "./$dir"; then
    rm -f "$tmp"
    echo "build.sh: building $dir failed" >&2
    exit 1
  fi
  mv -f "$tmp" "$out"
  sum="$(sha256sum "$out" | cut -d' ' -f1)"
  if [ -z "${OUT:-}" ]; then
    # Pin the digest with `capsule-host pin` (the manifest parsed as
    # strictly as the host does, only the value between the quotes
    # replaced), then record the toolchain (a comment: the manifest
    # schema is strict).
    pin "$dir" >/dev/null
    if grep -q '^# toolchain: ' "$manifest"; then
      sed -i -e "s/^# toolchain: .*/# toolchain: $gover/" "$manifest"
    else
      printf '# toolchain: %s\n%s\n' "$gover" "$(cat "$manifest")" > "$manifest"
    fi
    echo "built $out ($(stat -c %s "$out") bytes, sha256 $sum, $gover)"
  fi
done
