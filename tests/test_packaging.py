"""The toolkit as a built wheel: installed away from the checkout, its console scripts run from any
directory with the shipped cells and character LMs, and the demo launches its steps from it. A wheel
from pip's default isolated build (no torch, so no kernels built) compiles them on first use."""

import configparser
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

import tagger_data as td
from nas.fast import isa_builds, kernels

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("nas", "tagger")


def console_scripts() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    lines = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


def test_every_launcher_has_a_namespaced_console_script_running_the_same_command():
    scripts = console_scripts()
    assert all(name.startswith("nas-") for name in scripts)
    for launcher in sorted((REPO / "bin").iterdir()):
        module = re.search(r"^from (\S+) import main", launcher.read_text(), re.M).group(1)
        assert scripts.get(f"nas-{launcher.name}") == f"{module}:main", launcher.name
    assert len(scripts) == len(list((REPO / "bin").iterdir()))


def test_help_examples_name_the_launchers_in_a_checkout():
    helped = subprocess.run([str(REPO / "bin" / "eval-lm"), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "    bin/eval-lm runs/dartsv2 --data" in helped.stdout, helped.stderr


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def _source(folder: Path) -> Path:
    """A copy of what the wheel is built from, so building leaves nothing in the checkout."""
    folder.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, folder / name)
    for name in (*PACKAGES, "resources"):
        shutil.copytree(REPO / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return folder


@pytest.mark.slow  # a wheel built and installed in a fresh environment: a minute
def test_the_wheel_works_installed_away_from_the_checkout(tmp_path):
    source = _source(tmp_path / "source")
    pip = PIP
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheels"), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "wheels").glob("nas_tagger-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True, capture_output=True
    )
    top_level = {p.name for p in site.iterdir() if p.is_dir() and p.name != "bin" and not p.name.endswith(".dist-info")}
    assert top_level == set(PACKAGES)  # two names in the user's environment, as the README says
    installed = {p.relative_to(site) for p in site.rglob("*.py") if p.parts[len(site.parts)] in PACKAGES}
    assert installed == {p.relative_to(REPO) for name in PACKAGES for p in (REPO / name).rglob("*.py")} | {
        Path("nas", "resources", "__init__.py")
    }  # the checkout's resources/, installed inside nas
    # built without isolation beside torch (the README's way), the wheel carries the C++ kernels
    kernels_built_here = kernels.compiled() is not None
    if kernels_built_here:  # one build per ISA level (nas.fast.isa_builds), none for this machine's own
        builds = sorted(p.name.split(".")[0] for p in (site / "nas" / "fast").glob("_fused_kernels*.so"))
        assert builds == sorted(isa_builds.MODULES[level] for level in isa_builds.levels_for(platform.machine()))

    elsewhere = tmp_path / "elsewhere"  # no checkout on the path: the installed copy or nothing
    expected = td.write_conll03(elsewhere / "data")
    td.write_vectors(elsewhere / "vectors.txt")
    env = {**{k: v for k, v in os.environ.items() if k != "NAS_RESOURCES"}, "PYTHONPATH": str(site)}

    def run(argv, **extra):
        return subprocess.run(argv, capture_output=True, text=True, cwd=elsewhere, env={**env, **extra}, timeout=300)

    where = run(
        [
            sys.executable,
            "-c",
            "import nas, tagger; from nas.common.resources import resources_dir; "
            "from nas.cells.genotype import shipped_cells; print(nas.__file__, tagger.__file__, resources_dir()); "
            "print(*shipped_cells())",
        ]
    )
    assert where.returncode == 0, where.stderr
    paths, cells = where.stdout.splitlines()
    assert all(Path(p).is_relative_to(site) for p in paths.split()) and Path(paths.split()[2]).parts[-2:] == (
        "nas",
        "resources",
    )
    assert cells.split() == sorted(p.stem for p in (REPO / "resources" / "cells").glob("*.json"))
    if kernels_built_here:
        loads = run(
            [sys.executable, "-c", "from nas.fast import kernels; assert kernels.compiled(), kernels._kernels_error"]
        )
        assert loads.returncode == 0, loads.stderr
        # the widest build the CPU runs, chosen at run time (ATen's level, which ATEN_CPU_CAPABILITY lowers as
        # on an older CPU), each equal to the op-by-op layer, with no line
        for level in isa_builds.runnable(torch.backends.cpu.get_cpu_capability()):
            layer = run([sys.executable, "-c", FUSED_LAYER], ATEN_CPU_CAPABILITY=level.lower())
            assert layer.returncode == 0 and layer.stderr == "", layer.stderr
            assert Path(layer.stdout.split()[1]).name.startswith(isa_builds.MODULES[level] + "."), (level, layer.stdout)

    # the installed console script, the default cell (darts_v2, shipped) and shipped character LMs
    dry = run(
        [
            str(site / "bin" / "nas-train-tagger"),
            "--corpus",
            "conll03",
            "--data",
            "data",
            "--embeddings",
            "glove:vectors.txt,flair:wt2-forward:wt2-backward",
            "--hidden-size",
            "8",
            "--dry-run",
        ]
    )
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert json.loads(dry.stdout) == expected and "model: darts_v2 cell, hidden 8:" in dry.stderr

    # the demo's way of running a step works installed too, and shows the console script's name
    step = run(
        [
            sys.executable,
            "-c",
            "from pathlib import Path; from tagger.cli.demo import _run; "
            "_run('train-tagger', ['--cell', 'enas', '--corpus', 'conll03', '--data', 'data', '--embeddings', "
            "'glove:vectors.txt', '--hidden-size', '8', '--dry-run'], Path('step.log'))",
        ]
    )
    assert step.returncode == 0, step.stderr + (elsewhere / "step.log").read_text()
    assert (
        "$ nas-train-tagger --cell enas" in step.stderr and "model: enas cell" in (elsewhere / "step.log").read_text()
    )


# A frozen fused layer against its op-by-op path; which kernels ran, and from where.
FUSED_LAYER = """
import sys, torch, nas
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import load
from nas.fast import kernels
from nas.fast.backends import CpuFused
torch.manual_seed(0)
rnn = FrozenRNN(load("darts_v2"), 5, 4, directions=2).eval()
rnn.backend = CpuFused()
x = torch.randn(6, 3, 5)
with torch.no_grad():
    fused = rnn(x)[0]
    rnn.backend = None
    torch.testing.assert_close(fused, rnn(x)[0], rtol=1e-5, atol=1e-6)
module = kernels.compiled()
print(nas.__file__, module and module.__file__)
"""


@pytest.fixture(scope="module")
def isolated_wheel(tmp_path_factory) -> Path:
    """The wheel of `pip wheel --no-deps .`: pip's default isolated build, which installs setuptools and
    wheel into a fresh environment without torch (from the index pip is configured with; offline,
    a local index or find-links, as here, serves them)."""
    folder = tmp_path_factory.mktemp("isolated")
    built = subprocess.run(
        [*PIP, "wheel", "--no-deps", "-w", str(folder / "wheels"), str(_source(folder / "source"))],
        capture_output=True,
        text=True,
    )
    if built.returncode and re.search(
        r"No matching distribution|Could not find a version|Failed to establish", built.stderr
    ):
        pytest.skip(f"pip's isolated build cannot fetch setuptools here: {built.stderr.strip().splitlines()[-1]}")
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (folder / "wheels").glob("nas_tagger-*.whl")
    return wheel


@pytest.mark.slow  # an isolated `pip wheel` and a first-use compile of the kernels: about 40 s
def test_a_wheel_from_the_isolated_build_compiles_the_kernels_once_on_first_use(isolated_wheel, tmp_path):
    names = zipfile.ZipFile(isolated_wheel).namelist()
    assert "nas/fast/csrc/fused_kernels.cpp" in names and not [n for n in names if n.endswith(".so")]
    assert isolated_wheel.name.endswith("-py3-none-any.whl")
    # a fresh venv with the wheel and nothing else of the checkout; torch (and the other dependencies)
    # from this environment's site-packages, named by a .pth file (a path, not a site dir: the
    # checkout's editable install there does not come along)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "project-dependencies.pth").write_text(str(Path(torch.__file__).resolve().parents[1]) + "\n")
    subprocess.run(
        [*PIP, "--python", python, "install", "--no-deps", "--no-index", str(isolated_wheel)],
        check=True,
        capture_output=True,
    )
    cache = tmp_path / "cache"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NAS_RESOURCES")},
        "NAS_KERNELS_CACHE": str(cache),
    }

    def fused_layer(**extra):
        started = time.time()
        done = subprocess.run(
            [python, "-c", FUSED_LAYER], capture_output=True, text=True, cwd=tmp_path, env={**env, **extra}, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        installed, module = done.stdout.split()
        assert Path(installed).is_relative_to(venv)  # the wheel's copy, not the checkout
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return module, lines, time.time() - started

    module, lines, first = fused_layer()
    assert Path(module).is_relative_to(cache) and Path(module).name == "nas_fused_kernels.so"
    assert len(lines) == 1 and lines[0].startswith(f"nas.fast: compiling the C++ kernels once into {cache}"), lines
    again, lines, second = fused_layer()  # a second process loads the build: no line, no compiler
    assert again == module and lines == [] and second < first / 3, (lines, first, second)
    print(f"first use {first:.0f} s (compiling), second process {second:.1f} s")

    # the help's examples name the console scripts, as installed
    helped = subprocess.run(
        [str(venv / "bin" / "nas-eval-lm"), "--help"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert helped.returncode == 0 and "    nas-eval-lm runs/dartsv2 --data" in helped.stdout, helped.stderr
    assert "bin/" not in helped.stdout

    # without a compiler, an empty cache: the definition, and one line that says why
    _, lines, _ = fused_layer(NAS_KERNELS_CACHE=str(tmp_path / "empty"), CXX="no-such-compiler")
    assert lines == [
        "nas.fast: the C++ kernels could not be compiled on first use (no C++ compiler (no-such-compiler) on "
        "PATH); the cells run their definition through autograd (the same results, slower); to build them, "
        "install a C++ compiler ($CXX, else c++) and ninja (pip install ninja), then run "
        "nas-build-kernels (bin/build-kernels in a checkout)"
    ]

    # the command that builds them ahead of first use: ready at once where the cache has them
    ready = subprocess.run([str(venv / "bin" / "nas-build-kernels")], capture_output=True, text=True, env=env)
    assert ready.returncode == 0 and ready.stdout == f"C++ kernels ready: compiled for this processor ({module})\n"
