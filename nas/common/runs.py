"""Run directories: config.json, log.jsonl, metrics.json and an atomic checkpoint, the same for every command.

One command writes a run at a time: starting or resuming it takes the run's lock (`nas.common.locks`),
held until the command ends, and a second command on the same run is refused.

Nothing half-written stays: a run directory appears when a run starts (after its inputs are
checked), and a run that fails before its first checkpoint removes what it made (`discard`), so
the same command can be given the same directory again. Temporary files that a kill during an
atomic write leaves (`.NAME.XXXX.tmp`) are removed when a run starts or resumes there.

The log and the checkpoint of an epoch: the log line is written first, then the checkpoint, and
a resume drops the log lines of epochs after the checkpoint's (`trim_log`). A kill between the
two therefore loses neither: the epoch is run again and logged again. A last log line torn by a
kill is left out, with a warning.

A resume changes nothing of the run until its first checkpoint is written (`defer`): its new
config.json and the trimmed logs are held and written with that checkpoint, all or none
(`nas.common.files.atomic_write_all`); until then the logs it appends to are only appended to, and
a resume that fails first (a full disk) cuts them back to what they held (`roll_back`).
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shutil
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from . import guard, locks
from .locks import IN_PLACE
from .devices import PRECISIONS  # noqa: F401 - the vocabulary of autocast() below, kept in nas.common.devices
from .errors import InputError
from .files import (
    DISK_REFUSED,
    atomic_write_all,
    atomic_write_json,
    open_in_place,
    parse_json,
    read_json,
    safe_torch_load,
    utf8_lines,
    write_error,
)


TEMP_FILES = ".*.tmp"  # what nas.common.files.atomic_open leaves behind when killed mid-write

log = logging.getLogger(__name__)
# log.jsonl fields the pictures draw: counts, and numbers (null where not computed); an edited log with
# another type there is refused by line, not a TypeError deep in matplotlib
LOG_COUNTS = ("epoch", "step")
LOG_NUMBERS = ("train_ppl", "valid_ppl", "mad", "mad_inter", "eigenvalue", "lr", "seconds", "tokens_per_s")


def autocast(device: torch.device, precision: str):
    """The training step's precision: `bf16` runs it under torch.autocast (bf16 matmuls, fp32
    weights, losses and optimiser state); `fp32` is plain. Evaluation always runs in fp32, so
    validation perplexity measures what bf16 training did to the model."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def default_run_dir(kind: str) -> Path:
    return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


class _Pending:
    """A resume's changes held until its first checkpoint: files to write whole, by name, and the
    sizes of the in-place files when the resume began (what they are cut back to, and where the
    lines it appended begin)."""

    def __init__(self, folder: Path):
        self.files: dict[str, bytes] = {}
        self.kept: dict[str, bytes] = {}  # an in-place file's trimmed lines, before what the resume appends
        self.sizes = {name: _size(folder / name) for name in IN_PLACE}
        self.backups: dict[str, Path] = {}  # files replaced before the checkpoint -> their old content's name


COMMITTING = {"checkpoint.pt", "metrics.json"}  # the writes that make a resume's held changes the run's
_pending: dict[str, _Pending] = {}  # real path of a run directory -> its resume's held changes


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._made: Path | None = None  # the topmost folder `start` created
        self._before: set[str] | None = None  # what a folder that existed before `start` held

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.pt"

    def holds_run(self) -> bool:
        return (self.path / "config.json").exists() or self.checkpoint.exists()

    def start(self, config: dict, afresh: bool = False, checkpoint: dict | None = None) -> None:
        """Make the directory of a new run and write its config.json, and `checkpoint` if given (the
        state to resume from before the first epoch ends); if either write fails (a full disk), what
        was made is removed. One that holds a run is refused, unless `afresh`: a resumed run that
        never wrote a checkpoint starts over in it, and if a write fails there, its config.json and log
        are as they were."""
        if not afresh:
            if self.holds_run():
                raise InputError(
                    f"{self.path}: already holds a run; continue it with --resume {self.path} "
                    "or choose another --run-dir"
                )
            self.claim()
        self.path.mkdir(parents=True, exist_ok=True)
        self.clean_temp_files()
        try:
            if afresh and checkpoint is not None:  # the checkpoint first: its failure leaves the old config.json
                self.save_checkpoint(checkpoint)
            atomic_write_json(self.path / "config.json", config)
            if checkpoint is not None and not afresh:
                self.save_checkpoint(checkpoint)
        except BaseException:
            if afresh:  # a resume that found no checkpoint: the folder goes back to what it held
                self.checkpoint.unlink(missing_ok=True)
            else:
                self.discard()
            raise
        if afresh:
            (self.path / "log.jsonl").unlink(missing_ok=True)

    def claim(self) -> None:
        """Make the folder, noting what was there before, so that `discard` removes only what came after.
        A folder inside one the command reads (a corpus) is refused."""
        problem = guard.run_dir_problem(self.path)
        if problem:
            raise InputError(f"{self.path}: {problem}")
        if self.holds_run():
            raise InputError(f"{self.path}: already holds a run; choose another folder")
        guard.own(self.path)
        self._made = next((p for p in reversed([self.path, *self.path.parents]) if not p.exists()), None)
        self._before = None if self._made is not None else {p.name for p in self.path.iterdir()}
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock()

    def lock(self) -> None:
        """Be the one writer of this folder until the command ends (`nas.common.locks`): a second
        command starting or resuming a run here is refused, naming the process that writes it; so is
        a run whose files written in place are links to files elsewhere."""
        locks.lock(self.path)

    def discard(self) -> None:
        """Remove what `start` made, after a failure before the run's first checkpoint: the folder
        it created, or what was added to a folder that existed. A no-op for a run it did not start."""
        if self._made is not None:
            shutil.rmtree(self._made, ignore_errors=True)
        elif self._before is not None and self.path.is_dir():
            for entry in self.path.iterdir():
                if entry.name not in self._before:
                    shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        self._made = self._before = None

    def clean_temp_files(self) -> None:
        """Remove the temp files of atomic writes a kill interrupted (the files they were to replace are
        intact): a run starts or resumes here, and may rewrite its own files. Takes the run's lock first."""
        guard.own(self.path)
        self.lock()
        for stray in self.path.glob(TEMP_FILES):
            stray.unlink(missing_ok=True)

    def config(self) -> dict:
        if not (self.path / "config.json").is_file():
            raise InputError(f"{self.path}: not a run directory (no config.json)")
        return read_json(self.path / "config.json")

    def log(self, record: dict) -> None:
        """Append one line; a write the disk refuses leaves the log as it was (no torn line)."""
        path = self.path / "log.jsonl"
        line = (json.dumps(record) + "\n").encode("utf-8")
        with os.fdopen(open_in_place(path), "ab", buffering=0) as handle:
            size = handle.tell()
            try:
                rest = memoryview(line)
                while rest:  # an unbuffered write may take part of the line; the next says why not the rest
                    rest = rest[handle.write(rest) :]
            except OSError as err:
                handle.truncate(size)
                if err.errno in DISK_REFUSED:
                    raise write_error(path, err, len(line)) from None
                raise

    def read_log(self) -> list[dict]:
        """The logged records. A last line without its newline (the run was killed while writing it)
        is left out with a warning; any other line that is not a JSON record is an InputError."""
        path = self.path / "log.jsonl"
        held = _pending.get(os.path.realpath(self.path))
        if held is not None and "log.jsonl" in held.kept:  # a resume's: its trimmed lines, and those it wrote
            text = (held.kept["log.jsonl"] + self._appended("log.jsonl", held)).decode("utf-8")
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        if not path.is_file():
            return []
        records, number = [], 0
        for number, line in utf8_lines(path, complete=True):
            if line.strip():
                record = parse_json(line, str(path), number, what="not a JSON record")
                if not isinstance(record, dict):
                    raise InputError(f"{path}: line {number}: not a JSON record (an object)")
                problem = _record_problem(record)
                if problem:
                    raise InputError(f"{path}: line {number}: {problem}")
                records.append(record)
        if _ends_torn(path):
            log.warning(f"warning: {path}: line {number + 1} is torn (the run was killed while writing it); left out")
        return records

    def trim_log(self, epochs_done: int) -> None:
        """Keep the log lines of the epochs the checkpoint holds: drop those written after it (a kill
        came between an epoch's log line and its checkpoint) and a torn last line. Held with the
        resume's other changes (`defer`) until its first checkpoint."""
        guard.own(self.path)
        kept = [r for r in self.read_log() if r.get("epoch", 0) <= epochs_done]
        self.cut_torn("log.jsonl")
        self.defer_trim("log.jsonl", "".join(json.dumps(r) + "\n" for r in kept).encode("utf-8"))

    # -- a resume's changes, held until its first checkpoint ---------------------------------------

    def _held(self) -> _Pending:
        real = os.path.realpath(self.path)
        if real not in _pending:
            _pending[real] = _Pending(self.path)
            locks.at_end(self.roll_back)  # a command that ends before the first checkpoint leaves the run as it was
        return _pending[real]

    def cut_torn(self, name: str) -> None:
        """Cut the in-place file `name` after its last newline: a line torn by a kill, which the lines a
        resume appends would otherwise continue."""
        path = self.path / name
        if not path.is_file():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            os.truncate(path, data.rfind(b"\n") + 1)
            held = _pending.get(os.path.realpath(self.path))
            if held is not None and held.sizes.get(name) is not None:  # where the resume's lines now begin
                held.sizes[name] = min(held.sizes[name], data.rfind(b"\n") + 1)

    def keep_until_written(self, name: str) -> None:
        """A file of the run (best-model.pt) that a resume replaces before its first checkpoint: kept
        under another name (a hard link: no space) and put back if the resume fails first."""
        held = _pending.get(os.path.realpath(self.path))
        path = self.path / name
        if held is None or name in held.backups or not path.is_file():
            return
        backup = self.path / f".{name}.kept.tmp"  # a kill leaves it among the temp files a resume removes
        backup.unlink(missing_ok=True)
        os.link(path, backup)
        held.backups[name] = backup

    def defer(self, name: str, data: bytes) -> None:
        """Write the run's file `name` (its config.json) with the resume's first checkpoint, not now."""
        self._held().files[name] = data

    def defer_config(self, config: dict) -> None:
        self.defer("config.json", (json.dumps(config, indent=2, sort_keys=False) + "\n").encode("utf-8"))

    def defer_trim(self, name: str, kept: bytes) -> None:
        """The in-place file `name` is to keep `kept` (its lines up to the checkpoint) and what the resume
        appends after it: written so with the resume's first checkpoint, until then appended to as it is."""
        self._held().kept[name] = kept

    def write(self, files: dict[str, bytes]) -> None:
        """Write these files of the run (by name) together; the run's checkpoint or its metrics (its end)
        with the changes a resume held, all or none. Another file a resume writes before its first
        checkpoint (best.pt) is put back if that fails. A write the disk refuses leaves the run as the
        resume found it (`roll_back`)."""
        held = _pending.get(os.path.realpath(self.path))
        if held is not None and not COMMITTING & set(files):
            for name in files:
                self.keep_until_written(name)
            held = None
        elif held is not None:
            files = {**held.files, **{n: k + self._appended(n, held) for n, k in held.kept.items()}, **files}
        try:
            atomic_write_all({self.path / name: data for name, data in files.items()})
        except BaseException:
            self.roll_back()
            raise
        if held is not None:
            _pending.pop(os.path.realpath(self.path), None)
            for backup in held.backups.values():
                backup.unlink(missing_ok=True)

    def _appended(self, name: str, held: _Pending) -> bytes:
        """What the resume appended to the in-place file `name` (after the size it had)."""
        path = self.path / name
        if not path.is_file():
            return b""
        with open(path, "rb") as handle:
            handle.seek(held.sizes.get(name) or 0)
            return handle.read()

    def roll_back(self) -> None:
        """A resume that failed before its first checkpoint: the in-place files go back to the size
        they had (cutting needs no space), and what it held is dropped; the run is as it found it."""
        held = _pending.pop(os.path.realpath(self.path), None)
        if held is None:
            return
        for name, backup in held.backups.items():
            target = self.path / name
            if target.is_file() and os.path.samefile(backup, target):  # never replaced: rename would do nothing
                backup.unlink()
            else:
                os.replace(backup, target)
        for name, size in held.sizes.items():
            path = self.path / name
            try:
                if size is None:
                    path.unlink(missing_ok=True)
                elif path.is_file() and path.stat().st_size > size:
                    os.truncate(path, size)
            except OSError:
                pass

    def save_metrics(self, metrics: dict) -> None:
        self.write({"metrics.json": (json.dumps(metrics, indent=2, sort_keys=False) + "\n").encode("utf-8")})

    def save_checkpoint(self, state: dict, name: str = "checkpoint.pt") -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self.write({name: buffer.getvalue()})

    def load_checkpoint(self, name: str = "checkpoint.pt", map_location: Any = "cpu") -> dict:
        path = self.path / name
        if not path.is_file():
            raise InputError(f"{self.path}: no {name} to resume from")
        return safe_torch_load(path, map_location)


def _ends_torn(path: Path) -> bool:
    """True when the file's last line has no newline."""
    with open(path, "rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def rng_state(py_rng: random.Random | ModuleType) -> dict:
    """torch's generators (the CPU's, and each GPU's once CUDA is in use: dropout on a GPU draws there) and a
    Python one (a `random.Random`, or the module `random` for its global generator)."""
    version, internal, gauss = py_rng.getstate()
    state = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, py_rng: random.Random | ModuleType) -> None:
    """The generators of `rng_state`. torch takes generator states as CPU tensors, so states that a checkpoint
    loaded onto a GPU (`map_location`) come back to the CPU first."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    version, internal, gauss = state["python"]
    py_rng.setstate((version, tuple(internal), gauss))


class StopFlag:
    """Ctrl-C asks the loop to stop at the next batch boundary, where a consistent checkpoint can be written.

    A second Ctrl-C interrupts at once (the last checkpoint on disk stays good).
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def request(self) -> None:
        self.requested = True

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> "StopFlag":
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: no handler, Ctrl-C behaves as usual
            self._previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class Interrupted(Exception):
    """The run stopped on request after writing its checkpoint."""


def _record_problem(record: dict) -> str | None:
    """What is wrong with the type of a log record's drawn fields (None: nothing)."""
    for key in LOG_COUNTS:
        value = record.get(key)
        if key in record and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            return f"field {key!r}: must be a count (an integer, 0 or more), got {json.dumps(value)}"
    for key in LOG_NUMBERS:
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"field {key!r}: must be a number or null, got {json.dumps(value)}"
    return None
