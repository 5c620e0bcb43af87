"""One writer per run directory: a lock a command holds from the moment it starts or resumes a run there until it ends.

The lock is an `flock` on `RUN_DIR/.lock`, which the system releases when the process ends, however it
ends (a kill -9 included), so a dead writer never blocks the run. The file holds the writer's pid, to
name it to a second writer, which is refused. A command that ends removes the file; one left behind
with the lock free is a writer's that was killed: the next writer says so and takes it over. A lock
file that is a symbolic or hard link is refused (`nas.common.files.open_in_place`): its pid would be
written into the file it leads to.

Light on purpose (no torch). A command (`nas.common.cli.Command`) opens `holding()`; outside one (a
library caller, a test) nothing is locked, as `nas.common.guard` refuses nothing there.
"""

from __future__ import annotations

import fcntl
import logging
import os
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import InputError
from .files import open_in_place, require_own_file

LOCK_FILE = ".lock"
IN_PLACE = ("log.jsonl", "loss.tsv", "training.log")  # files of a run appended to, not replaced whole

log = logging.getLogger(__name__)

_held: dict[str, int] | None = None  # within a command: real path of a run directory -> the locked file's descriptor
_at_end: list[Callable[[], None]] = []  # within a command: what to do as it ends, before the locks go


def at_end(action: Callable[[], None]) -> None:
    """Run `action` when the command ends (however it ends), while it still holds its locks; outside
    a command, never."""
    if _held is not None:
        _at_end.append(action)


@contextmanager
def holding() -> Iterator[None]:
    """Hold the locks `lock` takes until the block ends (one command), then remove their files and release them."""
    global _held, _at_end
    outer, _held = _held, {}
    outer_actions, _at_end = _at_end, []
    try:
        yield
    finally:
        for action in _at_end:
            try:
                action()
            except Exception as err:  # the command's own error, if any, is the one to say
                log.warning(f"warning: {err}")
        _at_end = outer_actions
        for folder, fd in _held.items():
            _release(folder, fd)
        _held = outer


def lock(folder: str | os.PathLike) -> None:
    """Make this command the one writer of the run directory `folder` (which exists) until it ends; a
    second is an InputError naming the pid that holds it. Taken twice by one command, it is held once."""
    if _held is None:
        return
    real = os.path.realpath(folder)
    if real in _held:
        return
    path = os.path.join(folder, LOCK_FILE)  # named as given in messages; the same file as under `real`
    for name in IN_PLACE:  # the writer appends to these: they must be the run's own, not links elsewhere
        require_own_file(os.path.join(folder, name))
    while True:
        fd = open_in_place(path, os.O_RDWR | os.O_CREAT)  # never through a link to a file elsewhere
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid(fd)
            os.close(fd)
            raise InputError(
                f"{folder}: another command is writing this run (pid {holder or 'unknown'}, which holds "
                f"{path}); wait for it to end, or stop it, and run again"
            ) from None
        if _still_named(fd, path):
            break
        os.close(fd)  # its holder removed the file as it ended, after we opened it: lock the new one
    stale = _pid(fd)
    if stale:
        log.warning(f"note: {path}: left by pid {stale}, which ended without releasing it (killed?); taken over")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:  # a full disk: the lock holds all the same, a second writer just cannot be told whose it is
        pass
    _held[real] = fd


def _pid(fd: int) -> int | None:
    """The pid a lock file holds (None: empty or unreadable)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _still_named(fd: int, path: str) -> bool:
    """Whether the file open as `fd` is still the one at `path` (not removed, nor replaced)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _release(folder: str, fd: int) -> None:
    """Remove the lock file (while still holding it, so no one locks a file about to go), then release it."""
    path = os.path.join(folder, LOCK_FILE)
    try:
        if _still_named(fd, path):
            os.unlink(path)
    except OSError:
        pass
    os.close(fd)
