"""`--help` and flag errors of the tagger commands, the demo and search-tagger answer without loading flair or torch.

Loading flair takes seconds (about 14 s on a busy machine), so each command imports it only when
its work starts. Checked by the modules Python reports importing (`-X importtime`), not by a clock.
"""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMMANDS = (
    "train-tagger",
    "tag",
    "evaluate",
    "export",
    "train-charlm",
    "train-wordvec",
    "demo",
    "transfer",
    "search-tagger",
)
HEAVY = {"flair", "torch", "gensim", "seqeval", "transformers", "numpy"}


def imported_modules(importtime_stderr: str) -> set[str]:
    """Top-level package names from the `import time: self | cumulative | name` lines."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("args, code, says", [(["--help"], 0, "Usage:"), (["--bogus-flag"], 2, "No such option")])
def test_help_and_flag_errors_load_no_heavy_library(command, args, code, says):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO / "bin" / command), *args], capture_output=True, text=True
    )
    assert proc.returncode == code and says in proc.stdout + proc.stderr
    modules = imported_modules(proc.stderr)
    assert "click" in modules  # the import report was read
    assert not modules & HEAVY, sorted(modules & HEAVY)
