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
"""

from __future__ import annotations

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
from .devices import PRECISIONS  # noqa: F401 - the vocabulary of autocast() below, kept in nas.common.devices
from .errors import InputError
from .files import (
    DISK_REFUSED,
    atomic_torch_save,
    atomic_write_json,
    atomic_write_text,
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
        command starting or resuming a run here is refused, naming the process that writes it."""
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
        with open(path, "ab", buffering=0) as handle:
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
        came between an epoch's log line and its checkpoint) and a torn last line."""
        guard.own(self.path)
        kept = [r for r in self.read_log() if r.get("epoch", 0) <= epochs_done]
        atomic_write_text(self.path / "log.jsonl", "".join(json.dumps(r) + "\n" for r in kept))

    def save_metrics(self, metrics: dict) -> None:
        atomic_write_json(self.path / "metrics.json", metrics)

    def save_checkpoint(self, state: dict, name: str = "checkpoint.pt") -> None:
        atomic_torch_save(self.path / name, state)

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
