"""The docs site builds with `mkdocs build --strict` (a broken link or anchor, a page missing from
the nav, a command that mkdocs-click cannot import fails), and its command line reference lists
every console script with every flag; skipped unless the `docs` extra is installed. The README's
links into the docs point at files that exist."""

from __future__ import annotations

import configparser
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> dict[str, click.Command]:
    """Every console script of setup.cfg, by its bin/ name, as the click command it runs."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    commands = {}
    for line in parser["options.entry_points"]["console_scripts"].split("\n"):
        if line.strip():
            name, target = (part.strip() for part in line.split("="))
            module, attribute = target.split(":")
            commands[name.removeprefix("nas-")] = getattr(importlib.import_module(module), attribute)
    return commands


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    for module in ("mkdocs", "mkdocs_click", "mkdocstrings", "material"):
        pytest.importorskip(module)
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_cli_reference_lists_every_command_and_flag(site):
    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for name, command in _commands().items():
        assert f"bin/{name} [OPTIONS]" in page, f"bin/{name} is missing from the CLI reference"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in param.opts:
                    assert flag in page, f"bin/{name} {flag} is missing from the CLI reference"


def test_the_readme_links_to_files_that_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert len(targets) > 10
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
