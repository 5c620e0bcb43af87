"""What a command may write over: never a file it reads, nor a file of a run directory it did not start.

While a command runs (`nas.common.cli.Command` opens `guarding()`), the readers of `nas.common.files` note
every file they read, the command line's input paths are noted before any work, and the run
directories the command starts or resumes are noted as its own (`own`). Every write of
`nas.common.files` asks `write_problem` first, so whatever the name of a file (a symbolic or hard link,
`..`), an output that would replace one of the user's files is refused, as one `error:` line.

Outside a command (a library caller, a test) nothing is noted and nothing is refused.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator


@dataclass
class _Noted:
    files: dict[str, str] = field(default_factory=dict)  # real path of a file read -> how it was given
    inodes: dict[tuple[int, int], str] = field(default_factory=dict)  # the same by (device, inode): hard links
    folders: dict[str, str] = field(default_factory=dict)  # real path of an input folder -> its flag
    owned: set[str] = field(default_factory=set)  # real paths of the run directories this command runs in


_noted: _Noted | None = None


@contextmanager
def guarding() -> Iterator[None]:
    """Note reads and check writes for the duration of one command."""
    global _noted
    outer, _noted = _noted, _Noted()
    try:
        yield
    finally:
        _noted = outer


def _real(path: str | os.PathLike) -> str:
    return os.path.realpath(path)


def note_read(path: str | os.PathLike, how: str | None = None) -> None:
    """`path` is an input of this command (`how`: the flag that gave it, if any)."""
    if _noted is not None:
        if os.path.isdir(path):
            _noted.folders.setdefault(_real(path), how or str(path))
        else:
            _noted.files.setdefault(_real(path), how or str(path))
            identity = _identity(path)
            if identity is not None:
                _noted.inodes.setdefault(identity, how or str(path))


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """(device, inode) of an existing file: one file under every name a hard link gives it."""
    try:
        stats = os.stat(path)
    except OSError:
        return None
    return stats.st_dev, stats.st_ino


def own(run_dir: str | os.PathLike) -> None:
    """This command starts or continues the run in `run_dir`: it may rewrite that run's files."""
    if _noted is not None:
        _noted.owned.add(_real(run_dir))


def holds_run(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "config.json"))


def write_problem(path: str | os.PathLike) -> str | None:
    """Why this command must not write `path` (None: it may)."""
    if _noted is None:
        return None
    real = _real(path)
    folder = os.path.dirname(real)
    if folder in _noted.owned:
        return None
    read = _noted.files.get(real) or _noted.inodes.get(_identity(real) or (-1, -1))
    if read is not None:
        return f"an input of this command ({read}); refusing to write over it"
    if not os.path.lexists(real):
        return None
    if folder in _noted.folders:
        return f"a file in {_noted.folders[folder]}, a folder this command reads; refusing to write over it"
    if holds_run(folder):
        return f"a file of the run in {folder}, which this command did not start; refusing to write over it"
    return None


RUN_RECORD = ("config.json", "log.jsonl", "metrics.json", "checkpoint.pt")  # what every run directory holds


def record_problem(path: str | os.PathLike) -> str | None:
    """Why an output of the command must not be `path` (None: it may): one of the record files of the
    run it starts or continues, which the run itself writes."""
    if _noted is None:
        return None
    real = _real(path)
    if os.path.dirname(real) in _noted.owned and os.path.basename(real) in RUN_RECORD:
        return f"the run's own {os.path.basename(real)}; choose another path"
    return None


def run_dir_problem(path: str | os.PathLike) -> str | None:
    """Why a new run directory must not go at `path` (None: it may): inside a folder the command reads."""
    if _noted is None:
        return None
    real = _real(path)
    for folder, how in _noted.folders.items():
        if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
            return f"inside {how}, a folder this command reads; a run directory goes elsewhere"
    return None


def claims_run(path: str | os.PathLike) -> None:
    """A write of a run's config.json into a folder that held none makes the folder this command's run."""
    if _noted is not None and os.path.basename(path) == "config.json" and not os.path.lexists(_real(path)):
        own(os.path.dirname(_real(path)))
