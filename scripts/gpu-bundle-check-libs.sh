#!/usr/bin/env bash
# The bundle's check-libs.sh: every ELF file in the bundle (bin/, lib/, lib/ucx/) must load
# with what the bundle carries plus the C and C++ runtimes of the machine. A library found
# anywhere else (a system UCX, libnuma, a build folder of the machine that made the bundle)
# or not found at all fails the check, so the bundle cannot lean on what the building
# machine had. Then the Python package must load the bundle's library.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The machine's own: glibc's parts, the C++ runtime and the loader.
base='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|librt\.so\.1|libpthread\.so\.0|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
bad=0
files=0
while IFS= read -r f; do
  head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
  files=$((files + 1))
  while read -r name arrow path _; do
    [ -n "$name" ] || continue
    [[ "$name" =~ $base ]] && continue
    if [ "$arrow" != "=>" ]; then
      continue  # a line without "=>" is the loader or vdso
    fi
    case "$path" in
      "$here"/*) ;;
      not) echo "check-libs: ${f#"$here"/} needs $name: NOT FOUND"; bad=1 ;;
      *) echo "check-libs: ${f#"$here"/} takes $name from outside the bundle: $path"; bad=1 ;;
    esac
  done < <(ldd "$f" 2>&1 | sed 's/^[[:space:]]*//')
done < <(find "$here/bin" "$here/lib" -type f)
echo "check-libs: $files ELF files checked"
"${GW_PYTHON:-python3}" - "$here" <<'PYEOF' || bad=1
import os, sys
here = sys.argv[1]
os.environ["GRADWIRE_LIB"] = os.path.join(here, "lib", "libgradwire.so")
sys.path.insert(0, os.path.join(here, "python"))
import gradwire
from gradwire import _lib
print("check-libs: python loads %s (gradwire %s)" % (_lib.path, gradwire.version()))
with open("/proc/self/maps") as f:
    ucx = sorted({line.split()[-1] for line in f if "libuc" in line and ".so" in line})
print("check-libs: UCX libraries mapped: %s" % (", ".join(ucx) or "none"))
outside = [p for p in ucx if not p.startswith(here + "/")]
if outside:
    print("check-libs: UCX loaded from outside the bundle: %s" % ", ".join(outside))
    sys.exit(1)
PYEOF
[ $bad = 0 ] && echo "check-libs: every library resolves inside the bundle" || echo "check-libs: FAILED"
exit $bad
