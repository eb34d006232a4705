#!/usr/bin/env bash
# Formats every C, C++ and CUDA file of the project with .clang-format, or with --check,
# lists the files clang-format would change and fails (what the `format` test runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null; then
  echo "format: $fmt not found (apt-get install clang-format)" >&2
  exit 77
fi
cd "$root"
# The kernel emulator's runtime stands in for CUDA's own headers and keeps their layout.
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh' | grep -v '^tools/kernel_emulator/runtime/include/')
if [ "$check" = 0 ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$fmt" "$f" | cmp -s - "$f"; then
    echo "format: $f is not formatted (scripts/format.sh fixes it)"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "format: ${#files[@]} files formatted as .clang-format says"
exit "$bad"
