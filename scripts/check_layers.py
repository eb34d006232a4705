#!/usr/bin/env python3
"""Fails when a file includes a header of a layer above its own (docs/architecture.md).

Each rule names a folder and what its files may include from this repository: other
folders, and which public headers (include/gradwire/). A folder's files may always include
their own folder's headers. The most specific rule (longest folder) applies. Files outside
every rule (tests, perf tools, the torch backend, tools) are clients and may include anything.

Usage: scripts/check_layers.py [repo root]   (exit 1 and one line per violation)
       scripts/check_layers.py --self-test   (proves that it catches a violation)
"""
import os
import re
import sys

# Public headers by what they bring: the shared types, the codec API, the communicator API,
# the C ABI.
TYPES = {"gradwire/types.hpp", "gradwire/status.hpp", "gradwire/export.h", "gradwire/version.h"}
CODEC_API = TYPES | {"gradwire/codec.hpp", "gradwire/ef_state.hpp"}
COMM_API = CODEC_API | {"gradwire/communicator.hpp"}
C_ABI = COMM_API | {"gradwire/gradwire.h", "gradwire/standin.h"}

# folder: (internal folders it may include, public headers it may include)
RULES = {
    "include/gradwire": ([], C_ABI),
    "common": ([], TYPES),
    "compressors": (["common"], CODEC_API),
    "transport": (["common"], TYPES),
    "kernels": (["common", "compressors"], CODEC_API),
    # The collectives, layer by layer: the pieces every algorithm shares (the context a
    # collective runs in, its call checks, its statistics and timeline), then the
    # algorithms, the policy, and the communicator over all of them.
    "collectives/common": (["common", "compressors", "transport", "collectives/checks",
                            "collectives/observability"], COMM_API),
    "collectives/checks": (["common", "compressors", "transport", "collectives/common",
                            "collectives/algorithms/algorithm_table.hpp"], COMM_API),
    "collectives/observability": (["common", "compressors", "transport"], COMM_API),
    "collectives/algorithms": (["common", "compressors", "transport", "kernels", "collectives/common",
                                "collectives/checks", "collectives/observability", "collectives/algorithms",
                                "collectives/comm/topology.hpp"], COMM_API),
    "collectives/policy": (["common", "compressors", "transport", "collectives/common", "collectives/checks",
                            "collectives/observability", "collectives/algorithms",
                            "collectives/comm/topology.hpp"], COMM_API),
    "collectives/comm": (["common", "compressors", "transport", "kernels", "collectives"], COMM_API),
    # The call checks and the C ABI name algorithms: they read the table of them
    # (algorithm_table.hpp), never an algorithm. The C ABI sits on the C++ API and reaches
    # internals only through the narrow headers below, never the communicator's private state.
    # The stand-in accelerator's C ABI (gradwire/standin.h) makes its backend.
    "c_api": (["common", "compressors", "transport/bootstrap", "kernels", "collectives/checks",
               "collectives/algorithms/algorithm_table.hpp", "collectives/comm/comm_init.hpp",
               "collectives/algorithms/device/standin/standin_backend.hpp"], C_ABI),
}
LAYER_ROOTS = ("common", "compressors", "transport", "kernels", "collectives", "c_api", "gradwire")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".c")


def rule_for(path):
    best = None
    for folder in RULES:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(folder, included):
    internal, public = RULES[folder]
    if included.startswith("gradwire/"):
        return included in public
    if included.startswith(folder + "/"):
        return True
    return any(included == f or included.startswith(f + "/") for f in internal)


def self_test():
    """A tree with one file per kind of violation and one allowed include: exactly those fail."""
    import subprocess
    import tempfile
    files = {
        "compressors/bad_up.cpp": '#include "collectives/comm/communicator_impl.hpp"\n',
        "transport/bad_codec.hpp": '#include "gradwire/codec.hpp"\n',
        "collectives/algorithms/host/bad_comm.cpp": '#include "collectives/comm/communicator_impl.hpp"\n',
        "c_api/bad_private.cpp": '#include "collectives/comm/communicator_impl.hpp"\n',
        "kernels/good.cu": '#include "compressors/wire_header.hpp"\n#include "kernels/good.cuh"\n',
    }
    with tempfile.TemporaryDirectory() as tmp:
        for path, text in files.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(tmp, path), "w", encoding="utf-8") as f:
                f.write(text)
        r = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True, check=False)
    flagged = sorted(line.split(":")[0] for line in r.stdout.splitlines() if "may not include" in line)
    want = sorted(p for p in files if "bad_" in p)
    if r.returncode != 1 or flagged != want:
        print(f"check_layers self-test FAILED: exit {r.returncode}, flagged {flagged}, expected {want}")
        return 1
    print(f"check_layers self-test: the {len(want)} violations were caught, the allowed include was not")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = []
    checked = 0
    for folder in RULES:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                if rule_for(path) != folder:
                    continue  # a more specific rule covers it
                checked += 1
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if inc.split("/")[0] not in LAYER_ROOTS:
                            continue  # generated or local (gw_build_info.h)
                        if not allowed(folder, inc):
                            bad.append(f"{path}:{lineno}: {folder}/ may not include \"{inc}\"")
    for b in bad:
        print(b)
    if checked == 0:
        print(f"check_layers: no sources found under {root}")
        return 1
    print(f"check_layers: {checked} files, {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
