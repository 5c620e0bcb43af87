"""Run a command in a subprocess that SIGKILLs itself at a chosen checkpoint write: a real kill, at an exact moment.

`run_killed(module, args, at=n, when="after")` runs `python -m`-style `module.main` with `args`, and
the process kills itself (SIGKILL: no handler, no cleanup) right after, or right before, its n-th
write of a run's checkpoint.pt (`nas.common.runs.RunDir.save_checkpoint`, counted from 1). The
process never gets to tidy up, as with `kill -9` or a lost machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_DRIVER = """
import os, signal, sys, importlib
from nas.common.runs import RunDir
at, when, module = int(sys.argv[1]), sys.argv[2], sys.argv[3]
real, calls = RunDir.save_checkpoint, [0]

def save_then_die(self, state, name="checkpoint.pt"):
    if name == "checkpoint.pt":
        calls[0] += 1
        if calls[0] == at and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
    real(self, state, name)
    if name == "checkpoint.pt" and calls[0] == at and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)

RunDir.save_checkpoint = save_then_die
sys.argv = [module, *sys.argv[4:]]
importlib.import_module(module).main()
"""


def run(module: str, args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`module`'s command in a subprocess, as bin/ runs it."""
    return subprocess.run(
        [sys.executable, "-c", f"import {module} as m; m.main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=_env(),
    )


def run_killed(module: str, args: list[str], at: int, when: str = "after") -> subprocess.CompletedProcess:
    """`module`'s command, killed with SIGKILL after (or before) its `at`-th checkpoint write."""
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(at), when, module, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    return proc


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
