"""File helpers every command shares: atomic writes, strict UTF-8 reads, and pickle-free loads."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import stat
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from . import guard
from .errors import InputError, WriteRefused

_UMASK = os.umask(0)
os.umask(_UMASK)
DISK_REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # a write the file system refuses


@contextmanager
def atomic_open(path: str | os.PathLike, binary: bool = False, size: int | None = None) -> Iterator[IO]:
    """A file to write as you go: a temp file beside `path`, renamed over it only if the block ends
    without an exception (otherwise removed, with the folders made for it), so readers never see
    half a file. A path the command must not write over (`nas.common.guard`) is refused first, and a
    write the disk refuses (full, read-only) is an InputError naming the path (and, on a full disk,
    `size`, the bytes the file needs, where the caller knows them)."""
    path = Path(path)
    problem = guard.write_problem(path)
    if problem:
        raise InputError(f"{path}: {problem}")
    made = next((p for p in reversed([path.parent, *path.parent.parents]) if not p.exists()), None)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode a plain open() would
        guard.claims_run(path)
        os.replace(tmp, path)
    except BaseException as err:
        written = os.path.getsize(tmp) if tmp and os.path.exists(tmp) else 0
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if isinstance(err, OSError) and err.errno in DISK_REFUSED:
            raise write_error(path, err, size if size is not None else written, size is not None) from None
        raise


def write_error(path: Path, err: OSError, needed: int, exact: bool = True) -> WriteRefused:
    """One line for a write the system refused; on a full disk, the space free there and what the
    file needs (`exact`: its whole size; else at least what was written before the disk filled)."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        folder = next((p for p in [path.parent, *path.parent.parents] if p.exists()), Path("."))
        free = shutil.disk_usage(folder).free
        need = f"{_size(needed)}" if exact else f"more than {_size(needed)}"
        return WriteRefused(
            f"{path}: no space left on the device: {_size(free)} free, the file needs {need}; "
            "nothing was written (free some space and run again)"
        )
    return WriteRefused(f"{path}: cannot write ({err.strerror or err}); nothing was written")


def _size(count: float) -> str:
    """A byte count as people read it: 512 bytes, 3.2 MB."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, binary=True, size=len(data)) as handle:
        handle.write(data)


def atomic_write_all(files: dict[Path, bytes]) -> None:
    """Several files replaced together: each is written to its temp file first, and only when all are
    written are they renamed over their paths, so a write the disk refuses leaves every one as it was."""
    with ExitStack() as stack:
        for path, data in files.items():
            stack.enter_context(atomic_open(path, binary=True, size=len(data))).write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> None:
    import torch  # here, so that the commands that import this module answer --help at once

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def open_in_place(path: str | os.PathLike, flags: int = os.O_WRONLY | os.O_APPEND | os.O_CREAT) -> int:
    """A descriptor of `path` to write in place (a log appended to, a lock), never through a link: a
    symbolic link there (one to nothing included) or a file with other names (hard links), whose
    writes would land in a file outside the run, is an InputError, as is anything but a regular file."""
    try:  # O_TRUNC after the checks, which a hard link to a user's file fails
        fd = os.open(path, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(path):
            raise InputError(f"{path}: {link_problem(path)}") from None
        if err.errno == errno.EISDIR:
            raise InputError(f"{path}: a folder, not a file; remove it and run again") from None
        raise
    problem = in_place_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise InputError(f"{path}: {problem}")
    if flags & os.O_TRUNC:
        os.ftruncate(fd, 0)
    return fd


def link_problem(path: str | os.PathLike) -> str:
    return (
        f"a symbolic link (to {os.readlink(path)}), not a file of its own; writing it would write there: "
        "remove it and run again"
    )


def in_place_problem(stats: os.stat_result) -> str | None:
    """Why a file with these stats must not be written in place (None: it may)."""
    if not stat.S_ISREG(stats.st_mode):
        return "not a regular file; remove it and run again"
    if stats.st_nlink > 1:
        return (
            f"a hard link (one file under {stats.st_nlink} names); writing it would change the others too: "
            "remove it and run again"
        )
    return None


def require_own_file(path: str | os.PathLike) -> None:
    """An InputError unless `path` is missing or a regular file of its own (see `open_in_place`)."""
    try:
        stats = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(stats.st_mode):
        raise InputError(f"{path}: {link_problem(path)}")
    problem = in_place_problem(stats)
    if problem:
        raise InputError(f"{path}: {problem}")


def file_problem(path: str | os.PathLike) -> str | None:
    """Why `path` is not a regular file to read (None: it is): missing, a folder, a FIFO, socket or
    device, or a symbolic link that leads nowhere or in a loop."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symbolic link loop, not a file"
        if err.errno == errno.ENOENT:
            return "a symbolic link to nothing" if os.path.islink(path) else "no such file"
        return err.strerror or str(err)
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO, socket or device)"
    return None


def require_file(path: str | os.PathLike, context: str = "") -> None:
    """An InputError naming `path` (and `context`, e.g. the flag) unless it is a regular file."""
    problem = file_problem(path)
    if problem:
        raise InputError(f"{path}: {problem}{f' ({context})' if context else ''}")


def safe_torch_load(
    path: str | os.PathLike, map_location: Any = "cpu", allowed: Sequence[type] = (), flair_files: bool = False
) -> Any:
    """Load tensors and plain containers only (weights_only=True), and instances of the `allowed`
    data classes (built from their saved attributes, no code of the file's choosing): a crafted
    pickle never runs. A file flair saved itself is refused by name, unless `flair_files` (flair's
    own loaders, which `tagger.model_file` routes here): then it loads on the same terms."""
    import torch

    path = Path(path)
    require_file(path)
    guard.note_read(path)
    if not flair_files and _saved_by_flair(path):
        raise InputError(
            f"{path}: a model saved by flair itself, which this toolkit's commands do not read: in Python, "
            "`import tagger` first, then flair's SequenceTagger.load reads it without running pickled code "
            "(or refuses it); or train one with this toolkit"
        )
    fast = _restricted_pickle(allowed) if _plain_torch_zip(path) else None
    if fast is not None:
        try:
            with open(path, "rb") as handle:  # a handle: torch reads a path named *.safetensors as safetensors
                return torch.load(handle, map_location=map_location, weights_only=False, pickle_module=fast)
        except _Refused as refused:
            kinds = ["tensors", "plain containers", *(cls.__name__ for cls in allowed)]
            raise InputError(
                f"{path}: refused: its pickle names {refused.args[0]}, code that loading it would run (this "
                f"toolkit builds only {', '.join(kinds[:-1])} and {kinds[-1]})"
            ) from None
        except Exception:  # damaged: torch's weights-only loader says why, in its own words
            pass
    try:
        if _torchscript(_zip_names(path)):  # torch.load would warn and hand it to torch.jit.load
            raise ValueError("TorchScript")
        with torch.serialization.safe_globals(list(allowed)), open(path, "rb") as handle:
            return torch.load(handle, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for foreign or corrupt files
        raise InputError(f"{path}: {unreadable_model(path, err)}") from None


def _restricted_pickle(allowed: Sequence[type]) -> Any:
    """A pickle module whose Unpickler builds only what torch's weights-only unpickler allows (its
    tensors, storages, dtypes and plain containers) and the `allowed` classes, and refuses any other
    global: the "restricting globals" recipe of Python's pickle documentation. It is Python's C
    unpickler, so a model file holding a large vocabulary (a GloVe tagger: 400,000 words) loads in
    0.3 s instead of the 1.8 s of the weights-only unpickler, which runs each opcode in Python
    (docs/speed.md, "Start-up"). None when torch no longer names its allowed globals where looked for."""
    import pickle
    import types

    try:
        from torch._weights_only_unpickler import _get_allowed_globals

        names = dict(_get_allowed_globals())
    except (ImportError, AttributeError, TypeError):
        return None
    for cls in allowed:
        names[f"{cls.__module__}.{cls.__qualname__}"] = cls

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            found = names.get(f"{module}.{name}")
            if found is None:
                raise _Refused(f"{module}.{name}")
            return found

    module = types.ModuleType("restricted_pickle")
    module.Unpickler, module.load = Unpickler, lambda file, **kwargs: Unpickler(file, **kwargs).load()
    return module


class _Refused(Exception):
    """A global the restricted unpickler does not build (its name: args[0])."""


def _zip_names(path: Path) -> list[str] | None:
    """The members of a zip file (None: not a zip file, or damaged)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except Exception:  # damaged in any way: the weights-only loader's own error
        return None


def _torchscript(names: list[str] | None) -> bool:
    return names is not None and any(n == "constants.pkl" or n.endswith("/constants.pkl") for n in names)


def _plain_torch_zip(path: Path) -> bool:
    """A torch zip file of one pickle and its tensors: not TorchScript (which torch.load would hand
    to torch.jit.load unless weights_only), not the legacy format, not a .safetensors file."""
    names = _zip_names(path)
    return names is not None and sum(n.endswith("/data.pkl") for n in names) == 1 and not _torchscript(names)


def unreadable_model(path: Path, err: Exception) -> str:
    """What a file the weights-only loader refused is, in words: a safetensors file, a TorchScript
    program, or a file that is not a model (or is damaged), with the loader's reason."""
    with open(path, "rb") as handle:
        head = handle.read(9)
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < (100 << 20):
        return (
            "a safetensors file (bare tensors, without the model's settings and vocabulary), not a model file of "
            "this toolkit (a torch file that its commands and tagger.load_tagger write)"
        )
    if _torchscript(_zip_names(path)):
        return (
            "a TorchScript program (torch.jit.save), not a model file of this toolkit; it holds code, which this "
            "toolkit does not run"
        )
    return f"not a model file of this toolkit, or corrupt ({_load_problem(err)})"


PICKLE_PEEK = 16 << 20  # bytes of a model file's pickle looked at, never unpickled


def pickle_head(path: str | os.PathLike) -> bytes:
    """The first bytes of a torch zip file's pickle, to tell what wrote it without unpickling anything
    (b"" for a file that is not a torch zip file: torch's own error says what it is). Anything but a
    regular file (a FIFO would block the open) is an InputError first."""
    import zipfile

    require_file(path)
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if name is None:
                return b""
            with archive.open(name) as pickle:
                return pickle.read(PICKLE_PEEK)
    except (zipfile.BadZipFile, OSError):
        return b""


def _saved_by_flair(path: Path) -> bool:
    """A pickle of flair's: protocol 4, which flair saves with and torch does not, naming flair's classes."""
    head = pickle_head(path)
    return head.startswith(b"\x80\x04") and b"flair" in head


def _load_problem(err: Exception) -> str:
    """The useful part of torch's load error: the weights-only unpickler's own reason (e.g. the
    global a crafted pickle names), not its advice to load with weights_only=False."""
    text = str(err).strip()
    if text.startswith("Weights only load failed"):
        reasons = [
            p.strip() for p in text.split("\n\n")[1:] if p.strip() and not p.startswith("Check the documentation")
        ]
        return "refused by the weights-only loader: " + (reasons[0].splitlines()[0][:200] if reasons else "not tensors")
    if (isinstance(err, OSError) and err.errno == errno.EINVAL) or "failed finding central directory" in text:
        return "truncated or damaged"
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


# Bounds of the JSON this toolkit reads (genotypes, configs, metrics, log lines), far above what it
# writes: deeper nesting, longer integers or larger files are refused before they cost a traceback
# (Python's recursion limit, its 4300-digit limit on int()) or the machine's memory.
MAX_JSON_BYTES = 64_000_000
MAX_JSON_DEPTH = 64
MAX_JSON_DIGITS = 40


def read_json(path: str | os.PathLike) -> Any:
    """The JSON in `path`, within the bounds above; any problem is an InputError naming the file and line."""
    path = Path(path)
    require_file(path)
    guard.note_read(path)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise InputError(f"{path}: {_size(size)} of JSON, more than the {_size(MAX_JSON_BYTES)} this toolkit reads")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (a Windows editor's) is not JSON
    except UnicodeDecodeError as err:
        with open(path, "rb") as handle:
            raise InputError(
                utf16_problem(handle.read(UTF16_SNIFF), str(path)) or f"{path}: not UTF-8 text (byte {err.start})"
            ) from None
    return parse_json(text, str(path))


def parse_json(text: str, where: str, line: int | None = None, what: str = "invalid JSON") -> Any:
    """`text` as JSON within the bounds above; a problem is an InputError naming `where` and the line
    (`line`: the text is that line of `where`, e.g. of a log; `what`: what invalid text is called)."""
    at = f"{where}: line {line}" if line is not None else where
    if len(text) > MAX_JSON_BYTES:
        raise InputError(f"{at}: {_size(len(text))} of JSON, more than the {_size(MAX_JSON_BYTES)} this toolkit reads")
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: line {line or err.lineno}: {what} ({err.msg})") from None
    except RecursionError:
        data = None  # nested deeper than Python's recursion limit: refused below as too deep
        depth = MAX_JSON_DEPTH + 1
    except _TooLong as err:
        raise InputError(
            f"{at}: an integer of {err.args[0]} digits (this toolkit reads at most {MAX_JSON_DIGITS})"
        ) from None
    else:
        depth = _depth(data)
    if depth > MAX_JSON_DEPTH:
        raise InputError(f"{at}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return data


class _TooLong(ValueError):
    pass


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_JSON_DIGITS:
        raise _TooLong(len(digits.lstrip("-")))
    return int(digits)


def nesting_depth(data: Any) -> int:
    """`_depth` for loaded files of any kind (a model state): above MAX_JSON_DEPTH means too deep."""
    return _depth(data)


def _depth(data: Any) -> int:
    """How deeply lists, tuples and objects (dicts) nest in `data` (a scalar: 0), without recursion;
    counted up to one level past MAX_JSON_DEPTH."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_JSON_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest


UTF16_SNIFF = 4096  # bytes looked at to tell UTF-16 text from a binary file


def utf16_problem(head: bytes, name: str) -> str | None:
    """The line to say for a file that is UTF-16 text (`head`: its first bytes; a byte-order mark, or
    a NUL at nearly every other byte and nearly none between, as ASCII has in UTF-16), or None: it is
    not, and its NUL bytes make it a binary file."""
    zeros = sorted(half.count(0) / len(half) for half in (head[0::2], head[1::2])) if len(head) >= 4 else [0, 0]
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")) and not (zeros[0] <= 0.1 and zeros[1] >= 0.9):
        return None
    return (
        f"{name}: UTF-16 text, not UTF-8: convert it with iconv -f UTF-16 -t UTF-8 {name} > "
        f"{Path(name).name}.utf8 and give that file"
    )


def utf8_lines(path: str | os.PathLike, complete: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (line number, line without newline, nor a UTF-8 byte-order mark before line 1); a line
    that is not UTF-8, or holds a NUL byte (a binary file, as `bin/tag` says too), is an InputError
    naming it.

    `complete` leaves out a last line with no newline: of a log that a process appends to, it is
    the line being written, or the torn end of one killed while writing it.
    """
    path = Path(path)
    require_file(path)
    guard.note_read(path)
    position = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if complete and not raw.endswith(b"\n"):
                return
            nul = raw.find(b"\0")
            if nul >= 0:
                with open(path, "rb") as again:
                    utf16 = utf16_problem(again.read(UTF16_SNIFF), str(path))
                raise InputError(
                    utf16 or f"{path}: line {number}: a NUL byte (byte {position + nul}): a binary file, not text"
                )
            if number == 1 and not raw.endswith(b"\n") and b"\r" in raw.rstrip(b"\r"):
                raise InputError(
                    f"{path}: line 1: line breaks that are carriage returns alone (old Mac text), "
                    f"not line feeds: convert them with tr '\\r' '\\n' < {path} > {path.name}.unix"
                )
            position += len(raw)
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark is not text
            except UnicodeDecodeError as err:
                raise InputError(f"{path}: line {number}: bytes that are not UTF-8 (at byte {err.start})") from None
            yield number, line.rstrip("\r\n")
