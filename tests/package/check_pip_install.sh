#!/usr/bin/env bash
# `pip install --no-build-isolation --no-index` of the Python package into a fresh venv (no
# network, Debian's setuptools and wheel), with this build's libgradwire.so packaged inside it
# (GRADWIRE_PREBUILT_LIB: the CMake step itself is what `pip install .` runs, checked by hand
# and in CI's install job, too slow for every ctest). Then, from outside the source tree and
# with neither PYTHONPATH nor GRADWIRE_LIB: gradwire.info, and a 2-rank all-reduce.
#   check_pip_install.sh SOURCE_ROOT BUILD_DIR PYTHON
set -euo pipefail
src=$1
build=$(cd "$2" && pwd)
python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pip builds in the tree it is given: give it a copy, so the source tree stays untouched.
mkdir -p "$work/src"
cp -r "$src/pyproject.toml" "$src/setup.py" "$src/CMakeLists.txt" "$src/python" "$src/torch_backend" "$src/include" \
  "$src/cmake" "$work/src/"
find "$work/src/python" -name __pycache__ -prune -exec rm -rf {} +
"$python" -m venv --system-site-packages "$work/venv"
# Debian's torch is visible here: neither the install nor gradwire.info may compile the torch
# backend (check_pip_torch_backend.sh checks that part).
export GRADWIRE_TORCH_BACKEND_NO_BUILD=1
GRADWIRE_PREBUILT_LIB=$build/libgradwire.so "$work/venv/bin/pip" install -q --no-build-isolation --no-index \
  "$work/src" > "$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
test -f "$site/gradwire/libgradwire.so" || { echo "libgradwire.so is not inside the installed package"; exit 1; }
ls "$site"/gradwire/_torch_src/torch_backend/*.cpp "$site/gradwire/_torch_src/include/gradwire/version.h" >/dev/null ||
  { echo "the torch backend's sources are not inside the installed package"; exit 1; }
cd "$work"
unset PYTHONPATH GRADWIRE_LIB
"$work/venv/bin/python" -m gradwire.info > info.txt
cat info.txt
grep -q "^library  *$site/gradwire/libgradwire.so$" info.txt || { echo "gradwire.info: not the bundled library"; exit 1; }
grep -q "^gradwire (package)  *0\.1\.0$" info.txt || { echo "gradwire.info: no package version"; exit 1; }
grep -qE "^UCX  *[0-9]+\.[0-9]+" info.txt || { echo "gradwire.info: no UCX version"; exit 1; }
grep -qE "^built with CUDA  *(yes|no)$" info.txt || { echo "gradwire.info: no CUDA line"; exit 1; }
cat > allreduce.py <<'PY'
import numpy as np, gradwire
comm = gradwire.Communicator.from_env()
x = np.full(1000, comm.rank + 1, dtype=np.float32)
comm.allreduce(x)
assert (x == 3).all(), x[:4]
print("rank %d ok" % comm.rank)
comm.close()
PY
job=pip-$$-$RANDOM
export UCX_TLS=tcp,self
GW_RANK=0 GW_SIZE=2 GW_JOB_ID=$job "$work/venv/bin/python" allreduce.py > r0.out 2> r0.err &
p0=$!
GW_RANK=1 GW_SIZE=2 GW_JOB_ID=$job "$work/venv/bin/python" allreduce.py > r1.out 2> r1.err || { cat r1.out r1.err; exit 1; }
wait "$p0" || { cat r0.out r0.err; exit 1; }
for r in 0 1; do test ! -s r$r.err || { echo "rank $r wrote to stderr:"; cat r$r.err; exit 1; }; done
echo "pip install: ok"
