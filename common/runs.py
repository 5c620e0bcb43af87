"""Run directories: config.json, log.jsonl, metrics.json and an atomic checkpoint, the same for every command."""
from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import torch

from .errors import InputError
from .files import atomic_torch_save, atomic_write_json, atomic_write_text, read_json, safe_torch_load, utf8_lines


PRECISIONS = ("fp32", "bf16")


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

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.pt"

    def start(self, config: dict) -> None:
        if self.checkpoint.exists():
            raise InputError(f"{self.path}: already holds a run; continue it with --resume {self.path} "
                             "or choose another --run-dir")
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / "config.json", config)
        atomic_write_text(self.path / "log.jsonl", "")

    def config(self) -> dict:
        if not (self.path / "config.json").is_file():
            raise InputError(f"{self.path}: not a run directory (no config.json)")
        return read_json(self.path / "config.json")

    def log(self, record: dict) -> None:
        with open(self.path / "log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def read_log(self) -> list[dict]:
        """The logged records; a torn last line (the run was killed while writing it) is left out."""
        path = self.path / "log.jsonl"
        if not path.is_file():
            return []
        records = []
        for number, line in utf8_lines(path, complete=True):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise InputError(f"{path}: line {number}: not a JSON record ({err.msg})") from None
        return records

    def trim_log(self, epochs_done: int) -> None:
        """Drop log lines of epochs the checkpoint does not hold (written just before an interruption)."""
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


def rng_state(py_rng: random.Random) -> dict:
    version, internal, gauss = py_rng.getstate()
    return {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}


def set_rng_state(state: dict, py_rng: random.Random) -> None:
    torch.set_rng_state(state["torch"])
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
