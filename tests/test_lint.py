"""The linter is clean: ruff's checks and its formatting, as configured in pyproject.toml (line length 120)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it comes with the test extra (pip install -e '.[test]')")
    return [found]


@pytest.mark.parametrize(
    "args", [["check", "--no-cache"], ["format", "--check", "--no-cache"]], ids=["check", "format"]
)
def test_ruff_finds_nothing(args):
    done = subprocess.run([*_ruff(), *args, "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
