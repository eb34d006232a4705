"""The native half of `pip install .`: configures and builds libgradwire.so with CMake and puts
it inside the package (gradwire/libgradwire.so, where gradwire._lib looks). Metadata lives in
pyproject.toml.

Environment: CMAKE_ARGS (extra arguments for the configure, e.g. "-DGW_WITH_CUDA=OFF"),
CMAKE_BUILD_PARALLEL_LEVEL (build jobs, CMake's own variable), GRADWIRE_CMAKE_BUILD_DIR (a
build directory to reuse instead of a fresh one under build-pip/), GRADWIRE_PREBUILT_LIB (a
libgradwire.so already built: packaged as it is, CMake is not run).

It also puts the torch backend's sources in the package (gradwire/_torch_src/), and when torch
is importable here (`pip install --no-build-isolation .` into an environment that has it)
builds the backend into the package (gradwire/_torch_backend/); otherwise, or when that build
fails (a warning, not an error), the first `import gradwire.torch` builds it into a per-user
cache. GRADWIRE_TORCH_BACKEND_NO_BUILD=1: no build here either.
"""
import importlib.util
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(gradwire VERSION ([0-9.]+)", f.read()).group(1)


def _build_torch_module():
    """python/gradwire/_build_torch.py, loaded by path: the package is not importable here."""
    spec = importlib.util.spec_from_file_location("_gradwire_build_torch",
                                                  os.path.join(ROOT, "python", "gradwire", "_build_torch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        self.build_library()
        self.torch_backend()

    def torch_backend(self):
        bt = _build_torch_module()
        package = os.path.join(self.build_lib, "gradwire")
        bt.copy_sources(ROOT, os.path.join(package, bt.SRC_DIR))
        shutil.rmtree(os.path.join(package, bt.INSTALLED_DIR), ignore_errors=True)  # build-pip/ is reused
        if os.environ.get("GRADWIRE_TORCH_BACKEND_NO_BUILD") == "1" or importlib.util.find_spec("torch") is None:
            return
        missing = bt.missing_tools()
        if missing:
            self.warn("gradwire: the torch backend is not built at install time: %s" % "; ".join(missing))
            return
        build = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp), "torch-backend")
        os.makedirs(build, exist_ok=True)
        log = os.path.join(build, "build.log")
        cmd = [sys.executable, bt.__file__, "--src", os.path.join(package, bt.SRC_DIR), "--build-dir", build,
               "--into", os.path.join(package, bt.INSTALLED_DIR)]
        self.announce("gradwire: building the torch backend for this environment's torch (log: %s)" % log,
                      level=logging.INFO)
        with open(log, "w") as out:
            code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=bt.build_env())
        if code != 0:
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-20:])
            self.warn("gradwire: building the torch backend failed (exit status %d; the package is installed "
                      "without it, and `import gradwire.torch` will build it on first use). End of %s:\n%s"
                      % (code, log, tail))

    def build_library(self):
        target = os.path.join(self.build_lib, "gradwire", "libgradwire.so")
        prebuilt = os.environ.get("GRADWIRE_PREBUILT_LIB")
        if prebuilt:
            shutil.copyfile(os.path.realpath(prebuilt), target)
            os.chmod(target, 0o755)
            return
        build = os.environ.get("GRADWIRE_CMAKE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.get_finalized_command("build").build_temp), "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGW_BUILD_TESTS=OFF",
                     "-DGW_BUILD_PERF=OFF"] + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        self.announce("gradwire: " + " ".join(configure), level=2)
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build, "--target", "gradwire"])
        # The real file, not the libgradwire.so -> .so.0 -> .so.0.1.0 symlinks (wheels hold no links).
        shutil.copyfile(os.path.realpath(os.path.join(build, "libgradwire.so")), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


# Everything setuptools writes goes under build-pip/ (ignored by git), not into build/, which
# is scripts/build.sh's, nor into python/ (the egg-info).
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)
setup(version=project_version(), cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution,
      options={"build": {"build_base": "build-pip"}, "egg_info": {"egg_base": "build-pip"}})
