"""The toolkit as a built wheel: installed away from the checkout, its console scripts run from any
directory with the shipped cells and character LMs, and the demo launches its steps from it."""
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tagger_data as td
from nas.fast import kernels

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


def test_the_wheel_works_installed_away_from_the_checkout(tmp_path):
    source = tmp_path / "source"  # a copy, so building leaves nothing in the checkout
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in (*PACKAGES, "resources"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheels"), str(source)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "wheels").glob("nas_tagger-*.whl")
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True,
                   capture_output=True)
    top_level = {p.name for p in site.iterdir() if p.is_dir() and p.name != "bin" and not p.name.endswith(".dist-info")}
    assert top_level == set(PACKAGES)  # two names in the user's environment, as the README says
    installed = {p.relative_to(site) for p in site.rglob("*.py") if p.parts[len(site.parts)] in PACKAGES}
    assert installed == {p.relative_to(REPO) for name in PACKAGES for p in (REPO / name).rglob("*.py")} | \
        {Path("nas", "resources", "__init__.py")}  # the checkout's resources/, installed inside nas
    # built without isolation beside torch (the README's way), the wheel carries the C++ kernels
    kernels_built_here = kernels.compiled() is not None
    if kernels_built_here:
        assert len(list((site / "nas" / "fast").glob("_fused_kernels*.so"))) == 1

    elsewhere = tmp_path / "elsewhere"  # no checkout on the path: the installed copy or nothing
    expected = td.write_conll03(elsewhere / "data")
    td.write_vectors(elsewhere / "vectors.txt")
    env = {**{k: v for k, v in os.environ.items() if k != "NAS_RESOURCES"}, "PYTHONPATH": str(site)}

    def run(argv):
        return subprocess.run(argv, capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300)

    where = run([sys.executable, "-c", "import nas, tagger; from nas.common.resources import resources_dir; "
                 "from nas.cells.genotype import shipped_cells; print(nas.__file__, tagger.__file__, resources_dir()); "
                 "print(*shipped_cells())"])
    assert where.returncode == 0, where.stderr
    paths, cells = where.stdout.splitlines()
    assert all(Path(p).is_relative_to(site) for p in paths.split()) and Path(paths.split()[2]).parts[-2:] == ("nas", "resources")
    assert cells.split() == sorted(p.stem for p in (REPO / "resources" / "cells").glob("*.json"))
    if kernels_built_here:
        loads = run([sys.executable, "-c", "from nas.fast import kernels; assert kernels.compiled(), kernels._kernels_error"])
        assert loads.returncode == 0, loads.stderr

    # the installed console script, the default cell (darts_v2, shipped) and shipped character LMs
    dry = run([str(site / "bin" / "nas-train-tagger"), "--corpus", "conll03", "--data", "data",
               "--embeddings", "glove:vectors.txt,flair:wt2-forward:wt2-backward", "--hidden-size", "8", "--dry-run"])
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert json.loads(dry.stdout) == expected and "model: darts_v2 cell, hidden 8:" in dry.stderr

    # the demo's way of running a step works installed too, and shows the console script's name
    step = run([sys.executable, "-c", "from pathlib import Path; from tagger.cli.demo import _run; "
                "_run('train-tagger', ['--cell', 'enas', '--corpus', 'conll03', '--data', 'data', '--embeddings', "
                "'glove:vectors.txt', '--hidden-size', '8', '--dry-run'], Path('step.log'))"])
    assert step.returncode == 0, step.stderr + (elsewhere / "step.log").read_text()
    assert "$ nas-train-tagger --cell enas" in step.stderr and "model: enas cell" in (elsewhere / "step.log").read_text()
