"""The native half of `pip install .`: configures and builds libgradwire.so with CMake and puts
it inside the package (gradwire/libgradwire.so, where gradwire._lib looks). Metadata lives in
pyproject.toml.

Environment: CMAKE_ARGS (extra arguments for the configure, e.g. "-DGW_WITH_CUDA=OFF"),
CMAKE_BUILD_PARALLEL_LEVEL (build jobs, CMake's own variable), GRADWIRE_CMAKE_BUILD_DIR (a
build directory to reuse instead of a fresh one under build-pip/), GRADWIRE_PREBUILT_LIB (a
libgradwire.so already built: packaged as it is, CMake is not run).
"""
import os
import re
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(gradwire VERSION ([0-9.]+)", f.read()).group(1)


class BuildWithCMake(build_py):
    def run(self):
        super().run()
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
