#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over the library's sources, or over the files given, with the
# flags of a build tree's compile_commands.json ($GW_BUILD_DIR, default build/; any tree
# configured by scripts/build.sh has one). Slow: about 30 s a file on one core.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GW_BUILD_DIR:-$root/build}
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: no $build/compile_commands.json (configure with scripts/build.sh first)" >&2
  exit 2
fi
cd "$root"
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files 'common/*.cpp' 'compressors/*.cpp' 'kernels/*.cpp' 'transport/*.cpp' \
                                    'collectives/*.cpp' 'c_api/*.cpp')
fi
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy --quiet -p "$build"
