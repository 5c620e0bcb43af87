"""Child commands of this toolkit run as separate processes, each with its output in a log file.

Multi-seed search (`nas.runs.seeds`) and the demo (`tagger.cli.demo`) both run whole commands
(`python -m MODULE`, which works from a checkout and from an installed wheel alike) one after
another, keep each one's stdout and stderr in a log, and report a failure by its exit code and the
line of the log that says what went wrong.
"""

from __future__ import annotations

import os
import re
import site
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .files import open_in_place

IMPORT_ROOT = Path(__file__).resolve().parents[2]  # the folder this toolkit's packages are imported from
_LAUNCHER = re.compile(r"(?<![\w./-])bin/([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def command_name(name: str) -> str:
    """The command NAME as a user types it: `bin/NAME` in a checkout, the console script `nas-NAME`
    (setup.cfg) once installed."""
    return f"bin/{name}" if (IMPORT_ROOT / "bin" / name).is_file() else f"nas-{name}"


def as_invoked(text: str) -> str:
    """`text` (a command's help, its recorded command line) with each `bin/NAME` as `command_name`
    gives it; both are four characters, so wrapped text stays wrapped."""
    return _LAUNCHER.sub(lambda m: command_name(m.group(1)), text)


def run_module(module: str, args: list[str], log: Path, on_line: Callable[[str], None] | None = None) -> int:
    """`python -m MODULE ARGS` under this interpreter, with this toolkit importable in the child;
    stdout and stderr to `log`; the exit code. With `on_line`, the child writes unbuffered and each
    line it prints (a progress bar's `\\r` ends a line too) is also passed to `on_line` as it comes,
    so a caller can show progress while the log keeps the full output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*_toolkit_path(), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", module, *args]
    with os.fdopen(open_in_place(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:  # not via a link
        if on_line is None:
            return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env).returncode
        env["PYTHONUNBUFFERED"] = "1"
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as child:
            pending = b""
            while chunk := child.stdout.read1(65536):
                handle.write(chunk)
                handle.flush()
                *lines, pending = re.split(rb"[\r\n]", pending + chunk)
                for line in lines:
                    if line.strip():
                        on_line(line.decode("utf-8", errors="replace").rstrip())
            if pending.strip():
                on_line(pending.decode("utf-8", errors="replace").rstrip())
            return child.wait()


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
