#!/usr/bin/env python3
"""Device codec kernels against PyTorch on the same GPU, in one run (issue: GPU kernels).

A 64M-element fp32 gradient of heavy-tailed values (never zero) lives on the GPU. For each
row the median of --iters timed calls (CUDA events, after warm-up) is reported, with the
bandwidth of the bytes the operation must move (each read once, each write once) as a
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

usage: kernel_bench.py [--lib build-gpu/libgradwire.so] [--n 67108864] [--iters 20]
                       [--json out.json]
Prints a markdown table; exits 1 when a device encode fails.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    lib = ctypes.CDLL(path)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.gw_get_last_error.restype = ctypes.c_char_p
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


def check(lib, rc, what):
    if rc != 0:
        raise RuntimeError("%s failed (%d): %s" % (what, rc, lib.gw_get_last_error().decode()))


def timed(fn, iters, warmup=3):
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


def heavy_tailed(n, gen):
    # Student-t with 3 degrees of freedom (normal over sqrt(chi2/3)), scaled like a gradient.
    z = torch.randn(n, device="cuda", generator=gen)
    chi = torch.randn(n, 3, device="cuda", generator=gen).pow_(2).sum(dim=1).div_(3.0).sqrt_()
    x = (z / chi).mul_(1e-3)
    x[x == 0] = 1e-9
    return x.contiguous()


class Codec:
    def __init__(self, lib, spec, n):
        self.lib, self.n = lib, n
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
        stream = torch.cuda.current_stream().cuda_stream
        self.step += 1
        check(self.lib, self.lib.gw_encode_device_async(self.h, x.data_ptr(), self.n, 1, self.step, 0, ef,
                                                        self.out.data_ptr(), self.out.numel(),
                                                        ctypes.byref(self.written), stream),
              "gw_encode_device_async")
        return self.written.value

    def length(self):
        head = bytes(self.out[:56].cpu().numpy())  # waits for the stream
        total = ctypes.c_uint64()
        check(self.lib, self.lib.gw_message_length(head, len(head), ctypes.byref(total)), "gw_message_length")
        return total.value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build-gpu", "libgradwire.so"))
    ap.add_argument("--n", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    lib = load(os.path.abspath(args.lib))
    count = ctypes.c_int()
    check(lib, lib.gw_cuda_device_count(ctypes.byref(count)), "gw_cuda_device_count")
    n = args.n
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
    x = heavy_tailed(n, gen)
    y = torch.empty_like(x)
    props = torch.cuda.get_device_properties(0)
    rows = []

    copy_ms = timed(lambda: y.copy_(x), args.iters)
    copy_bw = 2 * 4 * n / copy_ms / 1e6  # GB/s, bytes read plus written
    rows.append({"op": "device-to-device copy (torch)", "ms": copy_ms, "GB/s": copy_bw, "goal": "reference"})

    def bw_row(name, ms, nbytes, goal_frac):
        bw = nbytes / ms / 1e6
        rows.append({"op": name, "ms": ms, "GB/s": bw, "of_copy": bw / copy_bw,
                     "goal": ">= %d%% of copy" % (goal_frac * 100), "met": bw / copy_bw >= goal_frac})

    large = "bucket=%d" % (1 << 24)
    for spec in ("qsgd:bits=8", "qsgd:bits=4", "sign", "qsgd:bits=8," + large, "sign:" + large):
        codec = Codec(lib, spec, n)
        ef = ctypes.c_void_p()
        check(lib, lib.gw_ef_state_create_device(n, ctypes.byref(ef)), "gw_ef_state_create_device")
        ms = timed(lambda: codec.encode(x, ef), args.iters)
        moved = 4 * n + 4 * n + codec.written.value + 4 * n
        bw_row("%s encode + EF" % spec, ms, moved, 0.75)
        lib.gw_ef_state_destroy(ef)

    def topk_row(name, spec, ratio, goal):
        k = max(1, int(ratio * n + 0.5))
        torch_ms = timed(lambda: torch.topk(x.abs(), k, sorted=False), args.iters)
        codec = Codec(lib, spec, n)
        ms = timed(lambda: codec.encode(x), args.iters)
        rows.append({"op": "%s (k=%d)" % (name, k), "ms": ms, "torch_topk_ms": torch_ms, "speedup": torch_ms / ms,
                     "goal": ">= %gx torch.topk" % goal, "met": torch_ms / ms >= goal})
        return codec

    topk_row("topk 0.001 encode", "topk:ratio=0.001", 0.001, 2.0)
    sparse = topk_row("topk 0.01 encode", "topk:ratio=0.01", 0.01, 2.0)
    topk_row("dgc 0.001 encode", "dgc:ratio=0.001", 0.001, 10.0)

    sparse.encode(x)
    length = sparse.length()
    k = max(1, int(0.01 * n + 0.5))
    stream = torch.cuda.current_stream().cuda_stream

    def decode():
        check(lib, lib.gw_decode_device(sparse.out.data_ptr(), length, y.data_ptr(), n, 1, 1, stream),
              "gw_decode_device")

    ms = timed(decode, args.iters)
    # The bytes it must touch: the message, and each destination element read and written.
    # DRAM moves whole 32-byte sectors, so scattered elements cost a sector each way: the
    # second row counts those (distinct sectors of the message's indices), the first 4 bytes.
    idx = sparse.out[56:56 + 4 * k].view(torch.int32).to(torch.int64)
    sectors = int(torch.unique(idx // 8).numel())
    bw_row("sparse decode-accumulate (topk 0.01), 4 B per element", ms, length + 2 * 4 * k, 0.5)
    bw_row("sparse decode-accumulate (topk 0.01), 32 B sectors (%d)" % sectors, ms, length + 2 * 32 * sectors, 0.5)

    print("GPU: %s, %d SMs; torch %s; n = %d fp32 (%.0f MiB); median of %d\n" % (
        props.name, props.multi_processor_count, torch.__version__, n, 4 * n / 2**20, args.iters))
    print("| operation | time (ms) | GB/s | of copy | torch.topk (ms) | speedup | goal | met |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print("| %s | %.3f | %s | %s | %s | %s | %s | %s |" % (
            r["op"], r["ms"], "%.0f" % r["GB/s"] if "GB/s" in r else "",
            "%.0f%%" % (100 * r["of_copy"]) if "of_copy" in r else "",
            "%.3f" % r["torch_topk_ms"] if "torch_topk_ms" in r else "",
            "%.1fx" % r["speedup"] if "speedup" in r else "", r["goal"],
            ("yes" if r["met"] else "**no**") if "met" in r else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": props.name, "n": n, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:
        print("kernel_bench: %s" % e, file=sys.stderr)
        sys.exit(1)
