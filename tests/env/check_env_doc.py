"""Every GW_* variable the library reads is in docs/configuration.md's table and in
common/env_vars.cpp's list (so it draws no "unknown variable" warning), and neither names
one the library does not read: `check_env_doc.py SOURCE_ROOT`."""
import os
import re
import sys

root = sys.argv[1]
LIBRARY_DIRS = ("common", "compressors", "transport", "kernels", "collectives", "c_api")


def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


# A name read by the library appears as a whole string literal: getenv("GW_X"), env("GW_X"),
# or a launcher table row. Names inside longer messages ("... GW_WITH_UCX=OFF") do not count.
read_by_code = set()
for d in LIBRARY_DIRS:
    for dirpath, _, files in os.walk(os.path.join(root, d)):
        for name in files:
            if name.endswith((".cpp", ".hpp", ".cu", ".h")) and name != "env_vars.cpp":
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    read_by_code |= set(re.findall(r'"(GW_[A-Z0-9_]+)"', f.read()))

env_vars = read("common/env_vars.cpp")
library_list = set(re.findall(r'"(GW_[A-Z0-9_]+)"', env_vars[env_vars.index("kLibrary[]"):env_vars.index("kScripts[]")]))

doc = read("docs/configuration.md")
table = doc[doc.index("## Every variable the library reads"):doc.index("## Read by the scripts and tests")]
documented = set()
for line in table.splitlines():
    if line.startswith("| `GW_"):
        documented |= set(re.findall(r"`(GW_[A-Z0-9_]+)`", line.split("|")[1]))

problems = []
for name in sorted(read_by_code - library_list):
    problems.append("%s is read by the library but missing from kLibrary in common/env_vars.cpp" % name)
for name in sorted(library_list - read_by_code):
    problems.append("%s is in kLibrary but nothing in %s reads it" % (name, "/".join(LIBRARY_DIRS)))
for name in sorted(read_by_code - documented):
    problems.append("%s is read by the library but not in docs/configuration.md's table" % name)
for name in sorted(documented - read_by_code):
    problems.append("%s is in docs/configuration.md's table but the library does not read it" % name)
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("%d variables: code, list and table agree" % len(read_by_code))
