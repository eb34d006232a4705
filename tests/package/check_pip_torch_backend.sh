#!/usr/bin/env bash
# Installing gives the torch backend (issue 26): a fresh venv (no system packages) with torch
# from PyPI, the version REF_PYTHON has (so pip's cache serves the multi-GB download after the
# first time), then `pip install` of a copy of the project (GRADWIRE_PREBUILT_LIB: this build's
# libgradwire.so, CMake is not run). From outside the source tree, with neither PYTHONPATH,
# GRADWIRE_LIB nor GRADWIRE_TORCH_BACKEND and an empty backend cache, two ranks import
# gradwire.torch at once, init_process_group("gradwire") and all_reduce a CPU tensor:
#   1. `pip install .` (build isolation: torch is not visible to setup.py): the first import
#      compiles the backend, once for both ranks;
#   2. `pip install --no-build-isolation .`: setup.py builds it into the package; the import
#      compiles nothing.
#   check_pip_torch_backend.sh SOURCE_ROOT BUILD_DIR REF_PYTHON
set -euo pipefail
src=$1
build=$(cd "$2" && pwd)
ref_py=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
phase=$start
timing=()
lap() { local now; now=$(date +%s); timing+=("$(printf '%-44s %4ds' "$1" $((now - phase)))"); phase=$now; }

torch_version=$("$ref_py" -c 'import torch; print(torch.__version__.split("+")[0])')
mkdir -p "$work/src"
cp -r "$src/pyproject.toml" "$src/setup.py" "$src/CMakeLists.txt" "$src/python" "$src/torch_backend" "$src/include" \
  "$src/cmake" "$work/src/"
find "$work/src/python" -name __pycache__ -prune -exec rm -rf {} +
# From a venv's python, venv makes a new one on the base interpreter: torch must come from pip.
"$ref_py" -m venv "$work/venv"
py=$work/venv/bin/python
# --no-compile: byte-compiling torch's thousands of files is most of the install's time, and
# this venv is thrown away.
pip() {
  "$py" -m pip --disable-pip-version-check "$@" >> "$work/pip.log" 2>&1 || { tail -50 "$work/pip.log"; exit 1; }
}
pip install --no-compile "torch==$torch_version"
lap "pip install torch==$torch_version"
export GRADWIRE_PREBUILT_LIB=$build/libgradwire.so
pip install --no-compile "$work/src[torch]"
lap "pip install the project (isolated build)"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
ls "$site"/gradwire/_torch_src/torch_backend/*.cpp > /dev/null
test ! -e "$site/gradwire/_torch_backend" || { echo "an isolated build saw torch?"; exit 1; }

cd "$work"
unset PYTHONPATH GRADWIRE_LIB GRADWIRE_TORCH_BACKEND GRADWIRE_TORCH_BACKEND_NO_BUILD GRADWIRE_TORCH_NO_CUDA
export UCX_TLS=tcp,self
cat > rank.py <<'PY'
import sys, torch, torch.distributed as dist
import gradwire._backend, gradwire.torch as gwt
rank, port = int(sys.argv[1]), sys.argv[2]
assert gwt.available(), gwt.unavailable_reason()
dist.init_process_group("gradwire", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert (t == 3).all(), t[:4]
dist.destroy_process_group()
print("rank %d ok (%s)" % (rank, gradwire._backend._ext.__file__))
PY
# Both ranks at once; prints what they wrote to stderr, and how many of them built the backend.
two_ranks() {
  local port
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$py" rank.py 0 "$port" > r0.out 2> r0.err &
  local p0=$!
  "$py" rank.py 1 "$port" > r1.out 2> r1.err || { cat r1.out r1.err; kill "$p0" 2>/dev/null; exit 1; }
  wait "$p0" || { cat r0.out r0.err; exit 1; }
  cat r0.out r1.out
  cat r0.err r1.err >&2
  built=$(cat r0.err r1.err | grep -c "^gradwire: building the torch backend for torch" || true)
}

export GRADWIRE_TORCH_BACKEND_CACHE=$work/cache
two_ranks
lap "2 ranks, first import builds the backend"
[ "$built" = 1 ] || { echo "the backend was built $built times, not once"; exit 1; }
so=$(ls "$work"/cache/*/*/_torch_backend_*.so)
echo "built once, cached: $so"
grep -q "($so)" r0.out || { echo "rank 0 did not load the cached build"; exit 1; }
two_ranks
lap "2 ranks again (cached)"
[ "$built" = 0 ] || { echo "the cached backend was built again"; exit 1; }

pip install --no-compile setuptools wheel
pip install --no-compile --no-build-isolation --no-deps --force-reinstall "$work/src"
lap "pip install --no-build-isolation (builds it)"
installed=$(ls "$site"/gradwire/_torch_backend/*/*/_torch_backend_*.so)
echo "built at install time: $installed"
export GRADWIRE_TORCH_BACKEND_CACHE=$work/cache2
two_ranks
lap "2 ranks, the package's build"
[ "$built" = 0 ] || { echo "the import built the backend though the package has one"; exit 1; }
grep -q "($installed)" r0.out || { echo "rank 0 did not load the package's build"; exit 1; }
test ! -e "$work/cache2" || { echo "something was written to the cache"; exit 1; }

printf '%s\n' "${timing[@]}"
echo "pip install gives the torch backend: ok ($(( $(date +%s) - start ))s)"
