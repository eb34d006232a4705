"""Builds gradwire's torch.distributed backend, the C++ extension in torch_backend/, for the
torch of the Python that runs it (torch.utils.cpp_extension: a C++ compiler, ninja, Python's
and torch's C++ headers). Three callers:

  scripts/build-torch-backend.sh   a source tree's build-torch/_torch_backend_<maj>_<min>/
  setup.py                         at install time, into the package, when torch is importable
  gradwire._backend (find_or_build) on first import when nothing fits the installed torch: once,
                                   into a per-user cache, under a file lock so that ranks
                                   importing together build it once and the others wait

Built for a torch with CUDA when cpp_extension finds a CUDA toolkit (CUDA_HOME), with
-DGW_TORCH_CUDA=1; CPU-only otherwise, or when GRADWIRE_TORCH_NO_CUDA=1.

Sources come from a source tree (torch_backend/, include/, version.h generated from
cmake/version.h.in) or from the copy setup.py puts in the package (gradwire/_torch_src/).
The installed copy and the cache hold <root>/<key>/<cuda|cpu>/<module>.so, where the key covers
the torch version and build, the Python ABI and a hash of the sources.

    python path/to/_build_torch.py [--src DIR] [--build-dir DIR] [--into ROOT]
"""
import argparse
import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    # Run as a file, this folder is sys.path[0], and its torch.py would shadow the real torch.
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

# Part of the key: bump it when the compile flags below change, so caches rebuild.
RECIPE = 1
SRC_DIR = "_torch_src"         # the sources, inside the installed package
INSTALLED_DIR = "_torch_backend"  # the build made at install time, inside the installed package
_ERROR_TAG = "gradwire-build-error: "  # how the build process names a known problem in its log


def module_name(torch_version):
    major, minor = (int(x) for x in torch_version.split("+")[0].split(".")[:2])
    return "_torch_backend_%d_%d" % (major, minor)


def project_version(root):
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        return re.search(r"project\(gradwire VERSION (\d+)\.(\d+)\.(\d+)", f.read()).groups()


def version_header(root):
    """The include/gradwire/version.h CMake generates, made here without a CMake build."""
    v = project_version(root)
    with open(os.path.join(root, "cmake", "version.h.in")) as f:
        text = f.read()
    for key, value in (("PROJECT_VERSION_MAJOR", v[0]), ("PROJECT_VERSION_MINOR", v[1]),
                       ("PROJECT_VERSION_PATCH", v[2]), ("PROJECT_VERSION", ".".join(v))):
        text = text.replace("@%s@" % key, value)
    return text


def _write_if_changed(path, text):
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, "w") as f:
        f.write(text)


class Sources:
    """The files the extension compiles from, under root: torch_backend/*.cpp and its headers,
    include/gradwire/*.h and *.hpp. In a source tree version.h is generated (generated_version);
    in the package's copy it is one of the headers."""

    def __init__(self, root):
        self.root = root
        self.tree = os.path.exists(os.path.join(root, "cmake", "version.h.in"))
        self.generated_version = version_header(root) if self.tree else None
        backend = os.path.join(root, "torch_backend")
        self.cpp = sorted(glob.glob(os.path.join(backend, "*.cpp")))
        headers = [os.path.join(backend, "*.hpp"), os.path.join(backend, "*.h"),
                   os.path.join(root, "include", "gradwire", "*.h"), os.path.join(root, "include", "gradwire", "*.hpp")]
        self.headers = sorted(p for pattern in headers for p in glob.glob(pattern))

    @classmethod
    def find(cls, pkg_dir):
        """The source tree this package sits in (python/gradwire), else the package's copy; None
        when there is neither (a package installed without them)."""
        for root in (os.path.dirname(os.path.dirname(pkg_dir)), os.path.join(pkg_dir, SRC_DIR)):
            if glob.glob(os.path.join(root, "torch_backend", "*.cpp")) and os.path.isdir(os.path.join(root, "include")):
                return cls(root)
        return None

    def files(self):
        """(name relative to root, bytes) of everything the compile reads from gradwire."""
        out = [(os.path.relpath(p, self.root), open(p, "rb").read()) for p in self.cpp + self.headers]
        if self.generated_version is not None:
            out.append((os.path.join("include", "gradwire", "version.h"), self.generated_version.encode()))
        return sorted(out)

    def digest(self):
        h = hashlib.sha256(b"recipe %d\n" % RECIPE)
        for name, data in self.files():
            h.update(b"%s %d\n" % (name.encode(), len(data)))
            h.update(data)
        return h.hexdigest()[:16]

    def include_dirs(self, build_dir):
        """Include folders for the compile; a source tree's version.h goes into build_dir."""
        dirs = [os.path.join(self.root, "include")]
        if self.generated_version is not None:
            gen = os.path.join(build_dir, "include", "gradwire")
            os.makedirs(gen, exist_ok=True)
            _write_if_changed(os.path.join(gen, "version.h"), self.generated_version)
            dirs.append(os.path.join(build_dir, "include"))
        return dirs


def copy_sources(root, dest):
    """Copies what the extension compiles from (a source tree's) into dest, version.h generated:
    setup.py puts it in the package as gradwire/_torch_src/, where Sources.find looks."""
    src = Sources(root)
    if not src.cpp:
        raise RuntimeError("no torch_backend/*.cpp in %s: the package needs the torch backend's sources" % root)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    for name, data in src.files():
        path = os.path.join(dest, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def key(torch, sources):
    """The folder name a build for this torch, this Python and these sources lives under (the
    variant, cuda or cpu, is a folder inside it)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ""  # .cpython-311-x86_64-linux-gnu.so
    abi = suffix[1:-3] if suffix.startswith(".") and suffix.endswith(".so") else ""
    abi = abi or sys.implementation.cache_tag
    git = (getattr(torch.version, "git_version", "") or "")[:8]
    raw = "torch%s-%s-%s-%s" % (torch.__version__, git, abi, sources.digest())
    return re.sub(r"[^A-Za-z0-9._+-]", "_", raw)


def variants(torch):
    """The builds that fit this torch, the preferred first."""
    if torch.version.cuda is not None and os.environ.get("GRADWIRE_TORCH_NO_CUDA") != "1":
        return ["cuda", "cpu"]
    return ["cpu"]


def cache_root():
    env = os.environ.get("GRADWIRE_TORCH_BACKEND_CACHE")
    if env:
        return os.path.abspath(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gradwire", "torch_backend")


def _bin_dirs():
    """Where a ninja from PyPI lands besides PATH: the running environment's scripts folder
    (not on PATH when its python runs without activating it) and the ninja package's own."""
    dirs = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    try:
        import ninja
        dirs.append(getattr(ninja, "BIN_DIR", ""))
    except ImportError:
        pass
    return [d for d in dirs if d]


def build_env():
    """os.environ with ninja's folder on PATH, as cpp_extension runs plain `ninja`."""
    env = dict(os.environ)
    path = env.get("PATH", os.defpath)
    ninja = shutil.which("ninja", path=path) or shutil.which("ninja", path=os.pathsep.join(_bin_dirs()))
    if ninja and not shutil.which("ninja", path=path):
        env["PATH"] = os.path.dirname(ninja) + os.pathsep + path
    return env


def missing_tools():
    """What a build needs and this machine lacks, each with how to get it ([] when complete).
    torch's own C++ headers are checked by the build itself."""
    missing = []
    path = os.environ.get("PATH", os.defpath)
    cxx = os.environ.get("CXX", "c++")  # what cpp_extension compiles with
    if not shutil.which(cxx, path=path):
        missing.append("no C++ compiler (%s not found on PATH: install g++, e.g. apt-get install g++, "
                       "or set CXX)" % cxx)
    if not shutil.which("ninja", path=build_env()["PATH"]):
        missing.append("no ninja (pip install ninja, or apt-get install ninja-build)")
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        missing.append("no Python headers (%s: apt-get install python3-dev)" % header)
    return missing


def _so_path(root, k, variant, name):
    return os.path.join(root, k, variant, name + ".so")


def find_or_build(name, pkg_dir, tree_root=None):
    """(path of the extension's .so, None) or (None, why not). First match wins:
    $GRADWIRE_TORCH_BACKEND (nothing else is tried when it is set); build-torch/<name>/ of the
    source tree tree_root; the copy built at install time inside the package (pkg_dir); the
    per-user cache; else a build into the cache, unless GRADWIRE_TORCH_BACKEND_NO_BUILD=1."""
    import torch
    env = os.environ.get("GRADWIRE_TORCH_BACKEND")
    if env:
        return (env, None) if os.path.exists(env) else (None, "GRADWIRE_TORCH_BACKEND=%s: no such file" % env)
    if tree_root:
        path = os.path.join(tree_root, "build-torch", name, name + ".so")
        if os.path.exists(path):
            return path, None
    sources = Sources.find(pkg_dir)
    if sources is None:
        return None, ("the gradwire torch backend for torch %s is not built and this package carries no sources "
                      "to build it (%s/%s); build it with scripts/build-torch-backend.sh of gradwire's source tree "
                      "and set GRADWIRE_TORCH_BACKEND to the .so" % (torch.__version__, pkg_dir, SRC_DIR))
    k = key(torch, sources)
    cache = cache_root()
    for root in (os.path.join(pkg_dir, INSTALLED_DIR), cache):
        for variant in variants(torch):
            if os.path.exists(_so_path(root, k, variant, name)):
                return _so_path(root, k, variant, name), None
    if os.environ.get("GRADWIRE_TORCH_BACKEND_NO_BUILD") == "1":
        return None, ("the gradwire torch backend for torch %s is not built (none in %s), and "
                      "GRADWIRE_TORCH_BACKEND_NO_BUILD=1 forbids building it on import; build it with: %s %s --into %s"
                      % (torch.__version__, os.path.join(cache, k), sys.executable, os.path.abspath(__file__), cache))
    missing = missing_tools()
    if missing:
        return None, ("the gradwire torch backend for torch %s is not built, and cannot be built here: %s. "
                      "Or build it where it can be (scripts/build-torch-backend.sh) and set GRADWIRE_TORCH_BACKEND "
                      "to the .so" % (torch.__version__, "; ".join(missing)))
    try:
        return _build_cached(name, torch, sources, cache, k)
    except OSError as e:
        return None, ("the gradwire torch backend for torch %s is not built, and building it into %s failed: %s "
                      "(GRADWIRE_TORCH_BACKEND_CACHE: another folder)" % (torch.__version__, cache, e))


def _build_cached(name, torch, sources, cache, k):
    """Builds into cache/k once: the first process to take the lock builds, the others wait for
    it and load what it built, or report its failure rather than fail the same way again."""
    folder = os.path.join(cache, k)
    os.makedirs(folder, exist_ok=True)
    log = os.path.join(folder, "build.log")
    failed = os.path.join(folder, "build.failed")
    started = time.time()
    with open(os.path.join(folder, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the holder exits, killed or not
        for variant in variants(torch):
            if os.path.exists(_so_path(cache, k, variant, name)):
                return _so_path(cache, k, variant, name), None
        if os.path.exists(failed) and os.path.getmtime(failed) >= started:
            with open(failed) as f:
                return None, f.read()
        print("gradwire: building the torch backend for torch %s (once, cached in %s)" % (torch.__version__, folder),
              file=sys.stderr, flush=True)
        code, problem = _run_build(sources, os.path.join(folder, "build"), cache, log)
        path = next((_so_path(cache, k, v, name) for v in variants(torch)
                     if os.path.exists(_so_path(cache, k, v, name))), None)
        if code == 0 and path:
            shutil.rmtree(os.path.join(folder, "build"), ignore_errors=True)  # objects: never reused
            if os.path.exists(failed):
                os.remove(failed)
            return path, None
        why = ("building the gradwire torch backend for torch %s failed%s; the compiler's output is in %s"
               % (torch.__version__, ": " + problem if problem else " (exit status %d)" % code, log))
        with open(failed, "w") as f:
            f.write(why)
        return None, why


def _run_build(sources, build_dir, into, log):
    """Runs this file as a separate process (its output goes to log, not to the importing
    process's terminal): (exit status, the problem it named or None)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--src", sources.root, "--build-dir", build_dir, "--into", into]
    with open(log, "w") as out:
        out.write("$ %s\n" % " ".join(cmd))
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=build_env())
    with open(log, errors="replace") as f:
        problems = [line[len(_ERROR_TAG):].strip() for line in f if line.startswith(_ERROR_TAG)]
    return code, problems[-1] if problems else None


def build(sources, build_dir, verbose=False):
    """Compiles the extension in build_dir for the running torch: (path of the .so, variant)."""
    import torch
    from torch.utils import cpp_extension

    if not any(os.path.exists(os.path.join(p, "torch", "extension.h")) for p in cpp_extension.include_paths()):
        raise SystemExit(_ERROR_TAG + "torch's C++ headers are not installed (no torch/extension.h under %s; "
                         "Debian's torch: apt-get install libtorch-dev)" % ", ".join(cpp_extension.include_paths()))
    major = int(torch.__version__.split(".")[0])
    name = module_name(torch.__version__)
    cuda = "cuda" in variants(torch) and cpp_extension.CUDA_HOME is not None
    if "cuda" in variants(torch) and not cuda:
        print("torch %s has CUDA but no CUDA toolkit is found (CUDA_HOME): building CPU-only" % torch.__version__)
    if cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST") and torch.cuda.device_count() == 0:
        # The sources are .cpp only, so nvcc never runs; but cpp_extension works out nvcc's arch
        # flags all the same, and without a visible GPU or this variable it fails (IndexError).
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    os.makedirs(build_dir, exist_ok=True)
    cpp_extension.load(
        name=name,
        sources=sources.cpp,
        build_directory=build_dir,
        # torch 1.13's cpp_extension asks for C++14, too old for the source; 2.x picks its own (C++20).
        extra_cflags=["-O2", "-Wall", "-Wno-unused-function"] + (["-std=c++17"] if major < 2 else [])
        + (["-DGW_TORCH_CUDA=1"] if cuda else []),
        extra_include_paths=sources.include_dirs(build_dir),
        with_cuda=cuda,
        verbose=verbose,
    )
    return os.path.join(build_dir, name + ".so"), "cuda" if cuda else "cpu"


def _install(path, dest):
    """Copies the .so to dest atomically: a process that finds dest finds it whole."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tmp = "%s.tmp%d" % (dest, os.getpid())
    shutil.copyfile(path, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Builds gradwire's torch backend for this Python's torch.")
    ap.add_argument("--src", help="a source tree, or a package's _torch_src (default: the one next to this file)")
    ap.add_argument("--build-dir", help="where to compile (default: INTO/<key>/build, else build-torch/<module> "
                    "of the source tree)")
    ap.add_argument("--into", help="also copy the .so to INTO/<key>/<cuda|cpu>/ (the package or the cache)")
    args = ap.parse_args(argv)
    import torch

    sources = Sources(args.src) if args.src else Sources.find(_HERE)
    if sources is None or not sources.cpp:
        raise SystemExit(_ERROR_TAG + "no torch_backend/*.cpp in %s" % (args.src or "the tree or package of " + _HERE))
    name = module_name(torch.__version__)
    k = key(torch, sources)
    build_dir = args.build_dir or (os.path.join(args.into, k, "build") if args.into else
                                   os.path.join(sources.root, "build-torch", name))
    path, variant = build(sources, build_dir, verbose=os.environ.get("VERBOSE") == "1")
    if args.into:
        dest = _so_path(args.into, k, variant, name)
        _install(path, dest)
        path = dest
    print("built %s for torch %s (%s)" % (path, torch.__version__, variant))


if __name__ == "__main__":
    main()
