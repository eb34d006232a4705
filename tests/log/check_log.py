"""GW_DEBUG, GW_DEBUG_SUBSYS, GW_DEBUG_FILE and unknown GW_* variables, each in a fresh
process: `check_log.py PATH/TO/log_probe`. Exits non-zero with what differed."""
import os
import re
import socket
import subprocess
import sys
import tempfile

PROBE = sys.argv[1]
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} (?P<host>[^:\s]+):(?P<pid>\d+):(?P<rank>-?\d+) gradwire "
                  r"(?P<level>VERSION|WARN|INFO|TRACE) (?P<subsys>[A-Z0-9]+) (?P<text>.*)$")
failures = []


def run(**env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("GW_")}
    base.update(env)
    p = subprocess.Popen([PROBE], env=base, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=60)
    if p.returncode != 0:
        failures.append("probe exited %d: %s" % (p.returncode, err))
    return err, p.pid


def parse(text, where):
    lines = []
    for raw in text.splitlines():
        m = LINE.match(raw)
        if not m:
            failures.append("%s: a line without the standard prefix: %r" % (where, raw))
            continue
        lines.append(m)
    return lines


def texts(lines):
    return [(m["level"], m["subsys"], m["text"]) for m in lines]


def expect(cond, what):
    if not cond:
        failures.append(what)


host = socket.gethostname().split(".")[0]

# Unset: WARN lines only, with timestamp, host, pid and rank.
out, pid = run()
lines = parse(out, "default")
expect(texts(lines) == [("WARN", "COLL", "probe warn coll"), ("WARN", "TUNE", "probe warn tune")],
       "default level: %r" % texts(lines))
expect(all(m["host"] == host and m["pid"] == str(pid) and m["rank"] == "3" for m in lines),
       "host/pid/rank: %r (want %s:%d:3)" % ([m.group(0) for m in lines], host, pid))

# INFO: the banner first, then every INFO line; TRACE lines stay out.
lines = parse(run(GW_DEBUG="INFO")[0], "INFO")
got = texts(lines)
expect(got and got[0][0] == "VERSION" and re.match(r"gradwire \d+\.\d+\.\d+ \(CUDA (yes|no), NCCL module (yes|no)\); UCX ",
                                                   got[0][2]), "INFO banner: %r" % got[:1])
expect(got[1:] == [("WARN", "COLL", "probe warn coll"), ("INFO", "COLL", "probe info coll"),
                   ("INFO", "INIT", "probe info init"), ("INFO", "TUNE", "probe info tune"),
                   ("WARN", "TUNE", "probe warn tune")], "INFO lines: %r" % got)
lines = parse(run(GW_DEBUG="trace")[0], "TRACE")
expect(("TRACE", "TRANSPORT", "probe trace transport") in texts(lines), "TRACE (lower case): %r" % texts(lines))

# VERSION: only the banner. NONE: nothing.
got = texts(parse(run(GW_DEBUG="VERSION")[0], "VERSION"))
expect(len(got) == 1 and got[0][0] == "VERSION", "VERSION: %r" % got)
out, _ = run(GW_DEBUG="NONE", GW_BOGUS="1")
expect(out == "", "NONE printed %r" % out)

# An unknown level: one warning that names the value and what was used instead.
got = texts(parse(run(GW_DEBUG="LOUD")[0], "bad level"))
expect(got[0] == ("WARN", "ENV", "GW_DEBUG='LOUD' is not NONE, VERSION, WARN, INFO or TRACE; using WARN"),
       "bad level warning: %r" % got[:1])
expect(sum(1 for g in got if "GW_DEBUG=" in g[2]) == 1, "bad level warned more than once: %r" % got)
expect(("INFO", "COLL", "probe info coll") not in got, "bad level let INFO through: %r" % got)

# GW_DEBUG_SUBSYS: a list, ^ for all but the list; WARN is never filtered.
got = texts(parse(run(GW_DEBUG="INFO", GW_DEBUG_SUBSYS="COLL")[0], "subsys COLL"))
infos = [g for g in got if g[0] == "INFO"]
expect(infos == [("INFO", "COLL", "probe info coll")], "SUBSYS=COLL: %r" % got)
expect(("WARN", "TUNE", "probe warn tune") in got, "SUBSYS=COLL hid a WARN: %r" % got)
got = texts(parse(run(GW_DEBUG="INFO", GW_DEBUG_SUBSYS="^COLL,tune")[0], "subsys ^COLL,TUNE"))
infos = [g for g in got if g[0] == "INFO"]
expect(infos == [("INFO", "INIT", "probe info init")], "SUBSYS=^COLL,tune: %r" % got)
got = texts(parse(run(GW_DEBUG="INFO", GW_DEBUG_SUBSYS="ALL")[0], "subsys ALL"))
expect(len([g for g in got if g[0] == "INFO"]) == 3, "SUBSYS=ALL: %r" % got)
got = texts(parse(run(GW_DEBUG="INFO", GW_DEBUG_SUBSYS="COLL,NETWORK")[0], "subsys unknown"))
expect(("WARN", "ENV", "GW_DEBUG_SUBSYS: unknown subsystem 'NETWORK' ignored (known: INIT, BOOTSTRAP, TRANSPORT, "
        "COLL, P2P, TUNE, CODEC, NCCL, ENV, ALL)") in got, "unknown subsystem: %r" % got)
expect([g for g in got if g[0] == "INFO"] == [("INFO", "COLL", "probe info coll")], "SUBSYS=COLL,NETWORK: %r" % got)

# GW_DEBUG_FILE with %h and %p: every line there, nothing on stderr; appended, not truncated.
with tempfile.TemporaryDirectory() as d:
    pattern = os.path.join(d, "gw.%h.%p.log")
    out, pid = run(GW_DEBUG="INFO", GW_DEBUG_FILE=pattern)
    path = os.path.join(d, "gw.%s.%d.log" % (host, pid))
    expect(out == "", "GW_DEBUG_FILE: stderr got %r" % out)
    expect(os.path.exists(path), "GW_DEBUG_FILE: no %s (have %r)" % (path, os.listdir(d)))
    if os.path.exists(path):
        with open(path) as f:
            got = texts(parse(f.read(), "file"))
        expect(len(got) == 6 and got[0][0] == "VERSION", "GW_DEBUG_FILE lines: %r" % got)
    shared = os.path.join(d, "shared.log")
    run(GW_DEBUG="WARN", GW_DEBUG_FILE=shared)
    run(GW_DEBUG="WARN", GW_DEBUG_FILE=shared)
    with open(shared) as f:
        expect(len(f.read().splitlines()) == 4, "two processes sharing GW_DEBUG_FILE must keep both")
    # Unwritable: one warning saying why, then stderr.
    bad = os.path.join(d, "no-such-dir", "x.log")
    got = texts(parse(run(GW_DEBUG="WARN", GW_DEBUG_FILE=bad)[0], "bad file"))
    expect(got[0] == ("WARN", "ENV", "GW_DEBUG_FILE: cannot open '%s' (No such file or directory); logging to stderr"
                      % bad), "unwritable GW_DEBUG_FILE: %r" % got[:1])
    expect(("WARN", "COLL", "probe warn coll") in got, "unwritable GW_DEBUG_FILE lost lines: %r" % got)

# Unknown GW_* variables: one warning each (with a suggestion when one is near); known ones
# (the library's and the scripts') draw none.
got = texts(parse(run(GW_DEBUG_SUBSYSTEM="COLL", GW_TIMEOUT="5", GW_FROBNICATE="1", GW_TIMEOUT_S="5",
                      GW_BUILD_DIR="/tmp", GW_NETNS_PREFIX="x")[0], "unknown vars"))
env_warnings = sorted(g[2] for g in got if g[1] == "ENV")
expect(env_warnings == sorted([
    "GW_DEBUG_SUBSYSTEM is set but gradwire does not read it (did you mean GW_DEBUG_SUBSYS?)",
    "GW_TIMEOUT is set but gradwire does not read it (did you mean GW_TIMEOUT_S?)",
    "GW_FROBNICATE is set but gradwire does not read it",
]), "unknown variables: %r" % env_warnings)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("log settings: all checks passed")
