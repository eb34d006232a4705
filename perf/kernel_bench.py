#!/usr/bin/env python3
"""Device codec kernels against PyTorch on the same GPU, in one run (issue: GPU kernels).

A 64M-element fp32 gradient of heavy-tailed values (never zero) lives on the GPU: Student-t
with 3 degrees of freedom times 1e-3, made on the GPU from a counter-based hash of (--seed,
element index), so every run with the same seed measures the same bits (on any GPU, in any
chunking). For each row the median of --iters timed calls (after warm-up) is reported, with
the bandwidth of the bytes the operation must move (each read once, each write once) as a
fraction of a device-to-device copy measured in the same run, or the speedup over
torch.topk at the same k:
  qsgd 8/4-bit and sign encode with error feedback: read g and residual, write the message
      and the residual; goal >= 75% of copy bandwidth; again with the largest bucket
      (2^24 elements: 4 buckets at 64M), where a warp per bucket would leave the GPU idle
      (qsgd spreads such buckets over the device; sign's mean is a chain of 2^19 dependent
      adds per lane, docs/architecture.md), same goal;
  exact topk at ratio 0.001 and 0.01 (no EF, as torch.topk has none): goal >= 2x torch.topk;
  dgc at 0.001: goal >= 10x torch.topk at the same k;
  sparse decode-accumulate (a topk 0.01 message): read the message and the k destination
      elements, write them; goal >= 50% of copy bandwidth, counted both with 4 bytes per
      element and with the 32-byte sectors DRAM must move for scattered elements.

Encodes, the copy and torch.topk are timed with CUDA events around the call (the encodes go
through gw_encode_device_async, which never waits on the host). gw_decode_device of a topk
message checks and applies it on the device, copies a verdict back and waits for the stream,
so events around it would time the host wait and Python too: its time is the device time of
the work the call enqueued (kernels, copies, memsets; the sum of their durations as
torch.profiler's CUDA activity records them, median over the calls), and the wall time per
call is shown beside it for information.

usage: kernel_bench.py [--lib PATH] [--n 67108864] [--iters 20] [--seed 1234] [--quick]
                       [--json out.json]
--lib defaults to $GRADWIRE_LIB, else build-gpu/libgradwire.so of this tree. --quick: 4M
elements and 5 iterations (a smoke run; its numbers are not the goals' measurement).
Prints the header at once and each markdown table row as soon as it is measured, then the
whole table and "kernel_bench: X of Y goals met". --json writes the same rows (rewritten
after every row, so a run cut short leaves what it measured). Exit status: 1 when a device
call fails (or there is no CUDA device, or the library cannot be loaded), else 0; goals
missed are **no** in their rows, not a failure.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER_BYTES = 56


def say(*a, **k):
    print(*a, **k)
    sys.stdout.flush()


def die(msg):
    say("kernel_bench: %s" % msg, file=sys.stderr)
    sys.exit(1)


def load(path):
    lib = ctypes.CDLL(path)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.gw_get_last_error.restype = ctypes.c_char_p
    lib.gw_get_last_error.argtypes = []
    lib.gw_codec_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.gw_codec_destroy.argtypes = [vp]
    lib.gw_codec_max_encoded_bytes.argtypes = [vp, sz, ctypes.c_int, ctypes.POINTER(sz)]
    lib.gw_ef_state_create_device.argtypes = [sz, ctypes.POINTER(vp)]
    lib.gw_ef_state_destroy.argtypes = [vp]
    lib.gw_encode_device.argtypes = [vp, vp, sz, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32, vp, vp, sz,
                                     ctypes.POINTER(sz), vp]
    lib.gw_encode_device_async.argtypes = lib.gw_encode_device.argtypes
    lib.gw_message_length.argtypes = [vp, sz, ctypes.POINTER(ctypes.c_uint64)]
    lib.gw_decode_device.argtypes = [vp, sz, vp, sz, ctypes.c_int, ctypes.c_int, vp]
    lib.gw_cuda_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
    return lib


class DeviceCallFailed(RuntimeError):
    pass


def check(lib, rc, what):
    if rc != 0:
        msg = lib.gw_get_last_error()
        raise DeviceCallFailed("%s failed (%d): %s" % (what, rc, msg.decode("utf-8", "replace") if msg else ""))


# ---------------------------------------------------------------- input

_M32 = 0xFFFFFFFF


def _mix(h):
    """A 32-bit multiply-xorshift mix of an int64 tensor of values below 2^32. The
    multipliers are below 2^31, so no product leaves int64's range."""
    h = (h ^ (h >> 16)) * 0x6C8E9CF5 & _M32
    h = (h ^ (h >> 13)) * 0x4F1BBCDD & _M32
    h = (h ^ (h >> 16)) * 0x5BD1E995 & _M32
    return h ^ (h >> 15)


def _uniform(torch, idx, seed, stream):
    """Uniform in (0, 1), float32, a pure function of (seed, stream, index)."""
    salt = (seed * 0x9E3779B97F4A7C15 + stream * 0x632BE59BD9B4E019 + 1) & _M32
    h = _mix(_mix(idx ^ salt) ^ ((seed >> 32) & _M32))
    return ((h >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)


def heavy_tailed(torch, n, seed, chunk=1 << 23, device="cuda"):
    """Student-t(3) * 1e-3, never zero: z / sqrt(chi2_3 / 3) with z, z' from one Box-Muller
    pair and chi2_3 = z'^2 + chi2_2, chi2_2 = -2 ln u. Elementwise on the GPU, in chunks."""
    if n >= 1 << 32:
        raise ValueError("n must be below 2^32")
    x = torch.empty(n, dtype=torch.float32, device=device)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        idx = torch.arange(start, start + m, dtype=torch.int64, device=device)
        u1, u2, u3 = (_uniform(torch, idx, seed, s) for s in (1, 2, 3))
        del idx
        r = torch.sqrt(-2.0 * torch.log(u1))
        theta = u2.mul_(2.0 * math.pi)
        z = r * torch.cos(theta)
        zp = r.mul_(torch.sin(theta))
        chi = torch.sqrt((zp * zp - 2.0 * torch.log(u3)) / 3.0)
        part = z.div_(chi).mul_(1e-3)
        x[start:start + m] = torch.where(part == 0, torch.full_like(part, 1e-9), part)
    return x


# ---------------------------------------------------------------- timing

def timed(torch, fn, iters, warmup=3):
    """Median milliseconds of fn() over iters calls, each between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def wall_ms(torch, fn, iters):
    """Median wall milliseconds of one fn() call (fn waits for its own work)."""
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def device_ms(torch, fn, iters, gap_s=0.002):
    """Device time of the work fn() enqueues: the calls run under torch.profiler (CUDA
    activity), a synchronize and gap_s of idle host between them; the device events (kernels,
    memcpys, memsets) are grouped by call (a gap of more than 1 ms between one event's end and
    the next one's start starts a new call) and each call's durations summed. Returns
    (median ms, how it was grouped, {event name: count per call}). No host wait and no Python
    is inside what is summed. (None, reason, {}) when the profiler saw no device event."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    with profile(activities=acts):  # the first session initialises CUPTI: not measured
        fn()
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        for _ in range(iters):
            fn()
            torch.cuda.synchronize()
            time.sleep(gap_s)
    events = list(prof.events())
    cpu_names = {e.name for e in events if not str(getattr(e, "device_type", "")).endswith("CUDA")}
    dev = []
    for e in events:
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        # Not work: a gpu_user_annotation mirroring a CPU range, or a synchronisation record.
        if e.name in cpu_names or "Sync" in e.name or "Wait" in e.name:
            continue
        dev.append((float(e.time_range.start), float(e.time_range.end), e.name))
    if not dev:
        return None, "torch.profiler recorded no CUDA device event (CUPTI unavailable?)", {}
    return group_calls(dev, iters)


def group_calls(dev, iters, gap_us=1000.0):
    """dev: (start us, end us, name) of device events. Groups them into calls (a new call
    where an event starts more than gap_us after the previous events ended) and sums each
    call's durations: (median ms per call, how, {name: count per call})."""
    dev = sorted(dev)
    groups = []
    for start, end, name in dev:
        if groups and start <= groups[-1]["end"] + gap_us:
            g = groups[-1]
            g["sum"] += end - start
            g["end"] = max(g["end"], end)
            g["names"].append(name)
        else:
            groups.append({"sum": end - start, "end": end, "names": [name]})
    names = {}
    for g in groups:
        for nm in g["names"]:
            names[nm] = names.get(nm, 0) + 1
    names = {nm: c / len(groups) for nm, c in names.items()}
    if len(groups) == iters:
        return statistics.median(g["sum"] for g in groups) / 1e3, "median of %d calls" % iters, names
    total = sum(g["sum"] for g in groups)
    return total / iters / 1e3, ("mean: %d device-event groups for %d calls" % (len(groups), iters)), names


# ---------------------------------------------------------------- codecs

class Codec:
    def __init__(self, torch, lib, spec, n):
        self.torch, self.lib, self.n = torch, lib, n
        self.h = ctypes.c_void_p()
        check(lib, lib.gw_codec_create(spec.encode(), ctypes.byref(self.h)), "gw_codec_create " + spec)
        cap = ctypes.c_size_t()
        check(lib, lib.gw_codec_max_encoded_bytes(self.h, n, 1, ctypes.byref(cap)), "max_encoded_bytes")
        self.out = torch.empty(cap.value, dtype=torch.uint8, device="cuda")
        self.written = ctypes.c_size_t()
        self.step = 0

    def encode(self, x, ef=None):
        # The call that never waits (dgc's gw_encode_device would wait for its length): what
        # is timed is the device's work alone. written is the length for every codec but
        # dgc, and the most it can be for dgc; length() reads the exact one from the header.
        stream = self.torch.cuda.current_stream().cuda_stream
        self.step += 1
        check(self.lib, self.lib.gw_encode_device_async(self.h, x.data_ptr(), self.n, 1, self.step, 0, ef,
                                                        self.out.data_ptr(), self.out.numel(),
                                                        ctypes.byref(self.written), stream),
              "gw_encode_device_async")
        return self.written.value

    def length(self):
        head = bytes(self.out[:HEADER_BYTES].cpu().numpy())  # waits for the stream
        total = ctypes.c_uint64()
        check(self.lib, self.lib.gw_message_length(head, len(head), ctypes.byref(total)), "gw_message_length")
        return total.value

    def close(self):
        if self.h:
            self.lib.gw_codec_destroy(self.h)
            self.h = ctypes.c_void_p()
        self.out = None


# ---------------------------------------------------------------- the table

COLUMNS = ("| operation | time (ms) | GB/s | of copy | torch.topk (ms) | speedup | wall/call (ms) | goal | met |\n"
           "|---|---:|---:|---:|---:|---:|---:|---|---|")


def fmt(r):
    if "error" in r:
        err = r["error"].replace("|", "/").replace("\n", " ")
        return "| %s | FAILED: %s | | | | | | %s | **no** |" % (r["op"], err, r.get("goal", ""))
    return "| %s | %.3f | %s | %s | %s | %s | %s | %s | %s |" % (
        r["op"], r["ms"], "%.0f" % r["GB/s"] if "GB/s" in r else "",
        "%.0f%%" % (100 * r["of_copy"]) if "of_copy" in r else "",
        "%.3f" % r["torch_topk_ms"] if "torch_topk_ms" in r else "",
        "%.1fx" % r["speedup"] if "speedup" in r else "",
        "%.3f" % r["wall_ms"] if "wall_ms" in r else "", r["goal"],
        ("yes" if r["met"] else "**no**") if "met" in r else "")


class Report:
    def __init__(self, meta, json_path):
        self.meta, self.json_path, self.rows, self.failures = meta, json_path, [], []

    def add(self, row):
        self.rows.append(row)
        if "error" in row:
            self.failures.append("%s: %s" % (row["op"], row["error"]))
        say(fmt(row))
        self.write_json()

    def goals(self):
        with_goal = [r for r in self.rows if "met" in r]
        return sum(1 for r in with_goal if r["met"]), len(with_goal)

    def write_json(self, final=False):
        if not self.json_path:
            return
        met, total = self.goals()
        doc = dict(self.meta, rows=self.rows, goals_met=met, goals_total=total, failures=self.failures,
                   complete=final)
        tmp = self.json_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, self.json_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None, help="libgradwire.so ($GRADWIRE_LIB, else build-gpu/ of this tree)")
    ap.add_argument("--n", type=int, default=None, help="elements (default 64M; --quick 4M)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls per row (default 20; --quick 5)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the input (default 1234)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4M elements, 5 iterations")
    ap.add_argument("--json")
    args = ap.parse_args()
    n = args.n if args.n is not None else ((4 << 20) if args.quick else (64 << 20))
    iters = args.iters if args.iters is not None else (5 if args.quick else 20)
    if n < 1000 or n >= 1 << 32 or iters < 1 or args.seed < 0:
        die("--n must be in [1000, 2^32), --iters at least 1, --seed not negative")

    try:
        import torch
    except ImportError as e:
        die("PyTorch is needed (%s)" % e)
    if not torch.cuda.is_available():
        die("no CUDA device visible to torch %s (built for CUDA %s): nothing to measure"
            % (torch.__version__, torch.version.cuda))
    path = args.lib or os.environ.get("GRADWIRE_LIB") or os.path.join(HERE, "..", "build-gpu", "libgradwire.so")
    path = os.path.abspath(path)
    if not os.path.exists(path):
        die("%s does not exist: pass --lib (or set GRADWIRE_LIB) to a CUDA build of libgradwire.so" % path)
    try:
        lib = load(path)
    except (OSError, AttributeError) as e:
        die("cannot load %s: %s" % (path, e))
    count = ctypes.c_int()
    try:
        check(lib, lib.gw_cuda_device_count(ctypes.byref(count)), "gw_cuda_device_count")
    except DeviceCallFailed as e:
        die("%s (a library built without CUDA cannot run this benchmark)" % e)
    if count.value < 1:
        die("the library sees no CUDA device")

    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(0)
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "n": n, "iters": iters, "seed": args.seed,
            "quick": args.quick, "torch": torch.__version__, "lib": path}
    report = Report(meta, args.json)
    say("GPU: %s, %d SMs; torch %s; n = %d fp32 (%.0f MiB); median of %d; seed %d%s; library %s\n" % (
        props.name, props.multi_processor_count, torch.__version__, n, 4 * n / 2**20, iters, args.seed,
        " (--quick: a smoke run, not the measurement)" if args.quick else "", path))
    t0 = time.perf_counter()
    x = heavy_tailed(torch, n, args.seed)
    torch.cuda.synchronize()
    say("input: Student-t(3) * 1e-3 from seed %d, made in %.0f ms; zeros %d, max |x| %.3g\n" % (
        args.seed, (time.perf_counter() - t0) * 1e3, int((x == 0).sum()), float(x.abs().max())))
    y = torch.empty_like(x)
    say(COLUMNS)

    try:
        copy_ms = timed(torch, lambda: y.copy_(x), iters)
    except RuntimeError as e:
        report.add({"op": "device-to-device copy (torch)", "error": str(e), "goal": "reference"})
        return finish(report, props)
    copy_bw = 2 * 4 * n / copy_ms / 1e6  # GB/s, bytes read plus written
    report.add({"op": "device-to-device copy (torch)", "ms": copy_ms, "GB/s": copy_bw, "goal": "reference"})

    def bw_row(name, ms, nbytes, goal_frac, **extra):
        bw = nbytes / ms / 1e6
        row = {"op": name, "ms": ms, "GB/s": bw, "of_copy": bw / copy_bw, "bytes": nbytes,
               "goal": ">= %d%% of copy" % (goal_frac * 100), "met": bw / copy_bw >= goal_frac}
        row.update(extra)
        report.add(row)

    large = "bucket=%d" % (1 << 24)
    for spec in ("qsgd:bits=8", "qsgd:bits=4", "sign", "qsgd:bits=8," + large, "sign:" + large):
        name = "%s encode + EF" % spec
        codec, ef = None, ctypes.c_void_p()
        try:
            codec = Codec(torch, lib, spec, n)
            check(lib, lib.gw_ef_state_create_device(n, ctypes.byref(ef)), "gw_ef_state_create_device")
            ms = timed(torch, lambda: codec.encode(x, ef), iters)
            moved = 4 * n + 4 * n + codec.written.value + 4 * n
            bw_row(name, ms, moved, 0.75)
        except RuntimeError as e:
            report.add({"op": name, "error": str(e), "goal": ">= 75% of copy", "met": False})
        finally:
            if ef:
                lib.gw_ef_state_destroy(ef)
            if codec is not None:
                codec.close()

    def topk_row(name, spec, ratio, goal, keep=False):
        k = max(1, int(ratio * n + 0.5))
        label = "%s (k=%d)" % (name, k)
        codec = None
        try:
            torch_ms = timed(torch, lambda: torch.topk(x.abs(), k, sorted=False), iters)
            codec = Codec(torch, lib, spec, n)
            ms = timed(torch, lambda: codec.encode(x), iters)
            report.add({"op": label, "ms": ms, "torch_topk_ms": torch_ms, "speedup": torch_ms / ms,
                        "goal": ">= %gx torch.topk" % goal, "met": torch_ms / ms >= goal})
        except RuntimeError as e:
            report.add({"op": label, "error": str(e), "goal": ">= %gx torch.topk" % goal, "met": False})
            if codec is not None:
                codec.close()
            return None
        if keep:
            return codec
        codec.close()
        return None

    topk_row("topk 0.001 encode", "topk:ratio=0.001", 0.001, 2.0)
    sparse = topk_row("topk 0.01 encode", "topk:ratio=0.01", 0.01, 2.0, keep=True)
    topk_row("dgc 0.001 encode", "dgc:ratio=0.001", 0.001, 10.0)

    decode_names = ("sparse decode-accumulate (topk 0.01), 4 B per element",
                    "sparse decode-accumulate (topk 0.01), 32 B sectors")
    try:
        if sparse is None:
            raise DeviceCallFailed("no topk 0.01 message to decode (its encode failed)")
        sparse.encode(x)
        length = sparse.length()
        k = (length - HEADER_BYTES) // 8  # 4-byte index and 4-byte value per element (n < 2^32)
        stream = torch.cuda.current_stream().cuda_stream

        def decode():
            check(lib, lib.gw_decode_device(sparse.out.data_ptr(), length, y.data_ptr(), n, 1, 1, stream),
                  "gw_decode_device")

        for _ in range(3):
            decode()
        wall = wall_ms(torch, decode, iters)
        dev_ms, how, names = device_ms(torch, decode, iters)
        extra = {"wall_ms": wall, "timing": "device time (torch.profiler), " + how, "device_ops_per_call": names}
        if dev_ms is None:
            say("kernel_bench: %s; the decode rows use the wall time per call instead" % how)
            dev_ms = wall
            extra["timing"] = "wall time per call (%s)" % how
        else:
            say("decode: device time %.3f ms (%s) of %s; wall %.3f ms per call" % (
                dev_ms, how, ", ".join("%s x%g" % (nm[:60], c) for nm, c in sorted(names.items())), wall))
        # The bytes it must touch: the message, and each destination element read and written.
        # DRAM moves whole 32-byte sectors, so scattered elements cost a sector each way: the
        # second row counts those (distinct sectors of the message's indices), the first 4 bytes.
        idx = sparse.out[HEADER_BYTES:HEADER_BYTES + 4 * k].view(torch.int32).to(torch.int64)
        sectors = int(torch.unique(idx // 8).numel())
        bw_row(decode_names[0], dev_ms, length + 2 * 4 * k, 0.5, **extra)
        bw_row("%s (%d)" % (decode_names[1], sectors), dev_ms, length + 2 * 32 * sectors, 0.5, **extra)
    except RuntimeError as e:
        for name in decode_names:
            report.add({"op": name, "error": str(e), "goal": ">= 50% of copy", "met": False})
    finally:
        if sparse is not None:
            sparse.close()
    return finish(report, props)


def finish(report, props):
    met, total = report.goals()
    say("\n%s, n = %d, seed %d, median of %d:\n" % (props.name, report.meta["n"], report.meta["seed"],
                                                     report.meta["iters"]))
    say(COLUMNS)
    for r in report.rows:
        say(fmt(r))
    say("\nkernel_bench: %d of %d goals met" % (met, total))
    report.write_json(final=True)
    if report.failures:
        say("kernel_bench: %d device call(s) failed:\n  %s" % (len(report.failures), "\n  ".join(report.failures)))
        return 1
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception:
        import traceback
        traceback.print_exc()
        say("kernel_bench: unexpected error (above)", file=sys.stderr)
        rc = 1
    sys.exit(rc)
