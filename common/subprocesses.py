"""Child commands of this toolkit run as separate processes, each with its output in a log file.

Multi-seed search (`nas.seeds`) and the demo (`pipeline.demo`) both run whole commands (a `bin/`
script or a `python -m` module) one after another, keep each one's stdout and stderr in a log,
and report a failure by its exit code and the line of the log that says what went wrong.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # where this toolkit is imported from
BIN = REPO_ROOT / "bin"


def run_module(module: str, args: list[str], log: Path) -> int:
    """`python -m MODULE ARGS`; stdout and stderr to `log`; the exit code."""
    return _run_python(["-m", module, *args], log)


def run_bin(name: str, args: list[str], log: Path) -> int:
    """`bin/NAME ARGS` under this Python; stdout and stderr to `log`; the exit code."""
    return _run_python([str(BIN / name), *args], log)


def _run_python(argv: list[str], log: Path) -> int:
    """This interpreter on `argv`, with this toolkit importable (PYTHONPATH) in the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with open(log, "w", encoding="utf-8") as handle:
        return subprocess.run([sys.executable, *argv], stdout=handle, stderr=subprocess.STDOUT, env=env).returncode


def last_error(log: Path) -> str:
    """The last `error: ...` line of a log, else its last non-empty line (a traceback's exception)."""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or ["(no output)"])[-1][:500]
