"""Every setting of a tagger training run, its defaults (NOTES §6) and its checks.

A light module (no flair, no torch), so `bin/train-tagger --help` shows the defaults at once.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import InputError


@dataclass
class TaggerConfig:
    """`bin/train-tagger`'s flags; the defaults follow I-DARTS / Akbik et al. (NOTES §6)."""

    cell: str = "darts_v2"
    corpus: str = "conll03"
    data: str = ""
    columns: str | None = None
    tag_column: str | None = None
    tag_scheme: str | None = None
    train_scheme: str = "bioes"
    embeddings: str = "glove:glove-6b-50d"
    pooling: str = "min"
    hidden_size: int = 512
    locked_dropout: float = 0.5
    word_dropout: float = 0.05
    dropout_x: float = 0.0
    dropout_h: float = 0.0
    reproject: bool = True
    lr: float = 0.1
    batch_size: int = 32
    eval_batch_size: int = 64
    max_epochs: int = 150
    anneal_factor: float = 0.25
    patience: int = 2
    min_lr: float = 1e-4
    clip: float = 5.0
    train_with_dev: bool = False
    seed: int = 1
    runs: int = 1
    device: str = "cpu"
    threads: int | None = None
    command: str = ""

    def check(self) -> None:
        """Sizes at least 1 and dropout rates in [0, 1); the device is checked where torch is loaded."""
        for name in ("hidden_size", "batch_size", "eval_batch_size", "max_epochs", "runs"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')}: must be at least 1, got {getattr(self, name)}")
        for name in ("locked_dropout", "word_dropout", "dropout_x", "dropout_h"):
            if not 0 <= getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')}: must be in [0, 1), got {getattr(self, name)}")
