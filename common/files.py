"""File helpers every command shares: atomic writes, strict UTF-8 reads, and pickle-free loads."""
from __future__ import annotations

import errno
import io
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

import torch

from .errors import InputError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_open(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """A file to write as you go: a temp file beside `path`, renamed over it only if the block ends
    without an exception (otherwise removed), so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, binary=True) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def safe_torch_load(path: str | os.PathLike, map_location: Any = "cpu", allowed: Sequence[type] = ()) -> Any:
    """Load tensors and plain containers only (weights_only=True), and instances of the `allowed`
    data classes (built from their saved attributes, no code of the file's choosing): a crafted
    pickle never runs."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for foreign or corrupt files
        raise InputError(f"{path}: not a model file of this toolkit, or corrupt ({_load_problem(err)})") from None


def _load_problem(err: Exception) -> str:
    """The useful part of torch's load error: the weights-only unpickler's own reason (e.g. the
    global a crafted pickle names), not its advice to load with weights_only=False."""
    text = str(err).strip()
    if text.startswith("Weights only load failed"):
        reasons = [p.strip() for p in text.split("\n\n")[1:] if p.strip() and not p.startswith("Check the documentation")]
        return "refused by the weights-only loader: " + (reasons[0].splitlines()[0][:200] if reasons else "not tensors")
    if isinstance(err, OSError) and err.errno == errno.EINVAL:
        return "truncated or damaged"
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: line {err.lineno}: invalid JSON ({err.msg})") from None


def utf8_lines(path: str | os.PathLike, complete: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (line number, line without newline); a line that is not UTF-8, or holds a NUL byte (a
    binary file, as `bin/tag` says too), is an InputError naming it.

    `complete` leaves out a last line with no newline: of a log that a process appends to, it is
    the line being written, or the torn end of one killed while writing it.
    """
    path = Path(path)
    position = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if complete and not raw.endswith(b"\n"):
                return
            nul = raw.find(b"\0")
            if nul >= 0:
                raise InputError(f"{path}: line {number}: a NUL byte (byte {position + nul}): a binary file, not text")
            position += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(f"{path}: line {number}: bytes that are not UTF-8 (at byte {err.start})") from None
            yield number, line.rstrip("\r\n")
