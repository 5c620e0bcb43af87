"""Child commands of this toolkit run as separate processes, each with its output in a log file.

Multi-seed search (`nas.seeds`) and the demo (`pipeline.demo`) both run whole commands
(`python -m MODULE`, which works from a checkout and from an installed wheel alike) one after
another, keep each one's stdout and stderr in a log, and report a failure by its exit code and the
line of the log that says what went wrong.
"""
from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

IMPORT_ROOT = Path(__file__).resolve().parent.parent  # the folder this toolkit's packages are imported from


def run_module(module: str, args: list[str], log: Path) -> int:
    """`python -m MODULE ARGS` under this interpreter, with this toolkit importable in the child;
    stdout and stderr to `log`; the exit code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*_toolkit_path(), env.get("PYTHONPATH")]))
    with open(log, "w", encoding="utf-8") as handle:
        return subprocess.run([sys.executable, "-m", module, *args], stdout=handle, stderr=subprocess.STDOUT,
                              env=env).returncode


def _toolkit_path() -> list[str]:
    """What the child needs on PYTHONPATH: a checkout's root, but not an installation's site-packages,
    which the child finds anyway (on PYTHONPATH it would come before the standard library)."""
    sites = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return [] if IMPORT_ROOT in sites else [str(IMPORT_ROOT)]


def last_error(log: Path) -> str:
    """The last `error: ...` line of a log, else its last non-empty line (a traceback's exception)."""
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or ["(no output)"])[-1][:500]
