"""`python3 -m gradwire.info`: versions (gradwire, UCX, torch, NCCL when loaded), transports
and what this gradwire was built with (CUDA, NCCL, the torch backend)."""
import importlib.util
import os
import re
import sys


def collect():
    """The report as a list of (name, value) rows."""
    from . import _lib

    rows = [("gradwire (package)", _package_version()), ("library", _lib.path)]
    code = _lib.version()
    rows.append(("library version", "%d.%d.%d" % (code // 10000, code // 100 % 100, code % 100)))
    banner = _lib.build_info()
    ucx = re.search(r"UCX ([^;]+)", banner)
    rows.append(("UCX", ucx.group(1) if ucx else "unknown (a library older than gw_get_build_info)"))
    rows.append(("transports", "ucx (UCX_TLS=%s)" % os.environ.get("UCX_TLS", "UCX's default: all")
                 if ucx and ucx.group(1) != "not built" else "none between processes (built without UCX)"))
    cuda = re.search(r"CUDA (yes|no)", banner)
    rows.append(("built with CUDA", cuda.group(1) if cuda else "unknown"))
    nccl = re.search(r"NCCL module (yes|no)", banner)
    rows.append(("built with NCCL", "unknown" if not nccl else
                 "yes (libnccl is opened at run time: GW_NCCL_LIBRARY)" if nccl.group(1) == "yes" else "no"))
    loaded = re.search(r"NCCL ([0-9.]+) \(loaded\)", banner)
    if loaded:
        rows.append(("NCCL loaded", loaded.group(1)))
    rows.extend(_torch_rows())
    return rows


def _package_version():
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("gradwire")
        except PackageNotFoundError:
            return "no pip metadata (package at %s)" % os.path.dirname(os.path.abspath(__file__))
    except ImportError:
        return "unknown"


def _torch_rows():
    if importlib.util.find_spec("torch") is None:
        return [("torch", "not importable"), ("torch backend", "needs torch")]
    try:
        import torch
    except Exception as e:  # a broken torch install should not hide the rest of the report
        return [("torch", "import failed: %s" % e)]
    rows = [("torch", torch.__version__)]
    try:
        from . import _backend
        if _backend._ext is not None:
            rows.append(("torch backend", "built (%s)" % getattr(_backend._ext, "__file__", "loaded")))
        else:
            rows.append(("torch backend", "not available: %s" % _backend._why_not))
    except Exception as e:
        rows.append(("torch backend", "not available: %s" % e))
    return rows


def main():
    try:
        rows = collect()
    except ImportError as e:
        print("gradwire: %s" % e, file=sys.stderr)
        return 1
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print("%-*s  %s" % (width, name, value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
