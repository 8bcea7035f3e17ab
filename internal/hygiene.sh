#!/usr/bin/env bash
# Fails if a build output is tracked: an executable (ELF) file, a Go test
# binary, a temporary file, or anything under a build cache directory. The
# bundled capsules' .wasm are tracked on purpose (capsules/verify.sh
# rebuilds them byte for byte), so wasm is not an output here.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
  case "$f" in
    *.tmp|*.test|*.prof|.build/*|*/.build/*|bin/*) echo "tracked build output: $f" >&2; bad=1; continue ;;
  esac
  [ -f "$f" ] || continue
  if [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
    echo "tracked ELF binary: $f" >&2; bad=1
  fi
done < <(git ls-files -z)
exit $bad
