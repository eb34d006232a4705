"""Where gradwire.torch finds its extension and how it builds one (python/gradwire/_build_torch.py):
the lookup order, the cache key, one build for processes importing together (the build itself
faked), the message when there is no compiler, and one real build (into the per-user cache, so
a machine compiles it once per source change and torch)."""
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD_TORCH = os.path.join(ROOT, "python", "gradwire", "_build_torch.py")


def _module():
    spec = importlib.util.spec_from_file_location("gw_build_torch_under_test", BUILD_TORCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bt = _module()


def _installed_package(tmp_path):
    """A package laid out as pip installs it, outside any source tree: site/gradwire with the
    sources setup.py copies in."""
    pkg = tmp_path / "site" / "gradwire"
    shutil.copytree(os.path.join(ROOT, "python", "gradwire"), str(pkg),
                    ignore=shutil.ignore_patterns("__pycache__"))
    bt.copy_sources(ROOT, str(pkg / bt.SRC_DIR))
    return str(pkg)


def _touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").close()
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("GRADWIRE_TORCH_BACKEND", "GRADWIRE_TORCH_BACKEND_NO_BUILD", "GRADWIRE_TORCH_NO_CUDA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRADWIRE_TORCH_BACKEND_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def test_the_package_copy_hashes_like_the_tree_and_any_change_changes_the_key(tmp_path):
    tree = bt.Sources(ROOT)
    assert tree.cpp, "no torch_backend/*.cpp"
    bt.copy_sources(ROOT, str(tmp_path / "a"))
    copy = bt.Sources(str(tmp_path / "a"))
    assert [os.path.basename(p) for p in copy.cpp] == [os.path.basename(p) for p in tree.cpp]
    assert os.path.exists(tmp_path / "a" / "include" / "gradwire" / "version.h")
    assert copy.digest() == tree.digest()
    seen = {copy.digest()}
    with open(copy.cpp[0], "a") as f:
        f.write("\n// changed\n")
    seen.add(bt.Sources(str(tmp_path / "a")).digest())
    _touch(str(tmp_path / "a" / "torch_backend" / "new_part.hpp"))
    seen.add(bt.Sources(str(tmp_path / "a")).digest())
    with open(tmp_path / "a" / "include" / "gradwire" / "version.h", "a") as f:
        f.write("\n")
    seen.add(bt.Sources(str(tmp_path / "a")).digest())
    assert len(seen) == 4


def test_lookup_order(tmp_path, clean_env):
    torch = pytest.importorskip("torch")
    name = bt.module_name(torch.__version__)
    pkg = _installed_package(tmp_path)
    key = bt.key(torch, bt.Sources.find(pkg))
    variant = bt.variants(torch)[0]
    cache = str(tmp_path / "cache")
    tree = str(tmp_path / "tree")
    env = _touch(str(tmp_path / "elsewhere" / (name + ".so")))
    in_tree = _touch(os.path.join(tree, "build-torch", name, name + ".so"))
    installed = _touch(os.path.join(pkg, bt.INSTALLED_DIR, key, variant, name + ".so"))
    cached = _touch(os.path.join(cache, key, variant, name + ".so"))
    clean_env.setenv("GRADWIRE_TORCH_BACKEND_NO_BUILD", "1")

    clean_env.setenv("GRADWIRE_TORCH_BACKEND", env)
    assert bt.find_or_build(name, pkg, tree) == (env, None)
    clean_env.setenv("GRADWIRE_TORCH_BACKEND", env + ".missing")  # set: nothing else is tried
    path, why = bt.find_or_build(name, pkg, tree)
    assert path is None and "GRADWIRE_TORCH_BACKEND=" in why and "no such file" in why
    clean_env.delenv("GRADWIRE_TORCH_BACKEND")
    for expected in (in_tree, installed, cached):
        assert bt.find_or_build(name, pkg, tree) == (expected, None)
        os.remove(expected)
    path, why = bt.find_or_build(name, pkg, tree)
    assert path is None and "GRADWIRE_TORCH_BACKEND_NO_BUILD=1" in why and key in why


def test_a_cpu_build_serves_a_cuda_torch_and_no_cuda_skips_the_cuda_one(tmp_path, clean_env):
    torch = pytest.importorskip("torch")
    name = bt.module_name(torch.__version__)
    pkg = _installed_package(tmp_path)
    key = bt.key(torch, bt.Sources.find(pkg))
    clean_env.setenv("GRADWIRE_TORCH_BACKEND_NO_BUILD", "1")
    cpu = _touch(os.path.join(str(tmp_path / "cache"), key, "cpu", name + ".so"))
    assert bt.find_or_build(name, pkg) == (cpu, None)
    _touch(os.path.join(str(tmp_path / "cache"), key, "cuda", name + ".so"))
    clean_env.setenv("GRADWIRE_TORCH_NO_CUDA", "1")
    assert bt.find_or_build(name, pkg) == (cpu, None)


def test_no_compiler_and_no_ninja_say_what_is_missing(tmp_path, clean_env):
    torch = pytest.importorskip("torch")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    clean_env.setenv("PATH", str(empty))
    clean_env.delenv("CXX", raising=False)
    clean_env.setattr(bt, "_bin_dirs", lambda: [])
    missing = bt.missing_tools()
    assert any(m.startswith("no C++ compiler (c++ not found") for m in missing), missing
    assert any(m.startswith("no ninja (pip install ninja") for m in missing), missing
    path, why = bt.find_or_build(bt.module_name(torch.__version__), _installed_package(tmp_path))
    assert path is None
    assert "cannot be built here: no C++ compiler" in why and "no ninja" in why, why
    assert not os.path.exists(tmp_path / "cache"), "nothing is built, nothing is cached"


def _library():
    lib = os.environ.get("GRADWIRE_LIB") or os.path.join(ROOT, "build", "libgradwire.so")
    return lib if os.path.exists(lib) else None


def test_init_process_group_raises_the_reason(tmp_path, clean_env):
    pytest.importorskip("torch")
    if _library() is None:
        pytest.skip("no libgradwire.so (GRADWIRE_LIB or build/)")
    pkg = _installed_package(tmp_path)
    script = textwrap.dedent("""
        import json, sys
        import torch.distributed as dist
        import gradwire.torch as gwt
        out = {"available": gwt.available(), "reason": gwt.unavailable_reason()}
        try:
            dist.init_process_group("gradwire", store=dist.HashStore(), rank=0, world_size=1)
            out["raised"] = None
        except Exception as e:
            out["raised"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(out))
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(pkg), GRADWIRE_LIB=_library(), CXX="/nonexistent/c++")
    r = subprocess.run([sys.executable, "-c", script], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["available"] is False
    assert "no C++ compiler (/nonexistent/c++ not found" in out["reason"], out
    assert out["raised"] and out["reason"] in out["raised"], out


# The build faked: each process waits for the go file, then calls find_or_build; the fake build
# takes a second and records that it ran.
_RACER = """
import json, os, sys, time, importlib.util
spec = importlib.util.spec_from_file_location("bt", sys.argv[1])
bt = importlib.util.module_from_spec(spec); spec.loader.exec_module(bt)
import torch
pkg, runs, go, fail = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
name = bt.module_name(torch.__version__)

def fake_build(sources, build_dir, into, log):
    with open(runs, "a") as f:
        f.write("%d\\n" % os.getpid())
    time.sleep(1.5)
    with open(log, "w") as f:
        f.write("fake compiler output\\n")
    if fail:
        return 1, None
    dest = os.path.join(into, bt.key(torch, sources), "cpu", name + ".so")
    os.makedirs(os.path.dirname(dest))
    open(dest, "w").close()
    return 0, None

bt._run_build = fake_build
bt.missing_tools = lambda: []
while not os.path.exists(go):
    time.sleep(0.01)
print(json.dumps(bt.find_or_build(name, pkg)))
"""


@pytest.mark.parametrize("fail", [False, True], ids=["builds", "fails"])
def test_processes_importing_together_build_once(tmp_path, clean_env, fail):
    pytest.importorskip("torch")
    pkg = _installed_package(tmp_path)
    runs, go = str(tmp_path / "runs"), str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, BUILD_TORCH, pkg, runs, go, "1" if fail else "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(2)]
    try:
        time.sleep(0.5)
        _touch(go)
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    with open(runs) as f:
        assert len(f.read().split()) == 1, "the build ran more than once"
    building = [err for _, err in outs if "gradwire: building the torch backend for torch" in err]
    assert len(building) == 1, [err for _, err in outs]
    assert "(once, cached in %s" % (tmp_path / "cache") in building[0]
    if fail:
        log = glob.glob(str(tmp_path / "cache" / "*" / "build.log"))
        assert len(log) == 1
        for path, why in results:
            assert path is None and "failed" in why and log[0] in why, why
    else:
        assert len({tuple(r) for r in results}) == 1 and results[0][1] is None
        assert results[0][0].startswith(str(tmp_path / "cache"))


def test_a_real_build_loads(tmp_path):
    """Compiles the extension from the package's copy of the sources into the per-user cache
    (once per machine, torch and source change; later runs find it) and imports it."""
    torch = pytest.importorskip("torch")
    pkg = _installed_package(tmp_path)
    skip = ("GRADWIRE_TORCH_BACKEND", "GRADWIRE_TORCH_BACKEND_NO_BUILD")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    script = textwrap.dedent("""
        import importlib.util, json, sys
        spec = importlib.util.spec_from_file_location("bt", sys.argv[1])
        bt = importlib.util.module_from_spec(spec); spec.loader.exec_module(bt)
        import torch
        name = bt.module_name(torch.__version__)
        path, why = bt.find_or_build(name, sys.argv[2])
        assert path, why
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        print(json.dumps([path, mod.TORCH_VERSION_MAJOR, mod.TORCH_VERSION_MINOR]))
    """)
    r = subprocess.run([sys.executable, "-c", script, BUILD_TORCH, pkg], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    path, major, minor = json.loads(r.stdout.strip().splitlines()[-1])
    assert path.startswith(bt.cache_root() + os.sep), path
    assert "%d.%d" % (major, minor) == ".".join(torch.__version__.split(".")[:2])
