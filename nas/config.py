"""The settings of a search and of a retraining run, and their validation.

Light on purpose (no torch): the commands build their flags from these defaults and choices and
check a config before any work starts, so `--help` and a bad flag answer at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from common.errors import InputError

from .methods import METHODS

PRECISIONS = ("fp32", "bf16")  # common.runs.autocast
SEARCH_SPACES = ("intra", "inter", "joint")
ATTENTION_CHOICES = ("search", "dot", "multihead", "none")  # a searched mix, nas.genotype.ATTENTION_TYPES, or none
GATE_SQUASHES = ("sigmoid", "2sigmoid", "none")  # the keys of nas.gates.SQUASHES
GATE_SIZE_MATCHES = ("project", "pad")  # nas.gates.SIZE_MATCHES

C = TypeVar("C", bound="LMConfig")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass
class LMConfig:
    """The knobs of every language-model training run, search and retraining alike.

    The defaults are DARTS's PTB model (NOTES §5); a search overrides the sizes and the few
    settings DARTS searches with.
    """

    train: str = ""
    valid: str = ""
    test: str = ""
    epochs: int = 8000  # an upper limit: DARTS retrains for thousands of epochs
    seed: int = 1267
    emsize: int = 850
    nhid: int = 850
    batch_size: int = 64
    eval_batch_size: int = 10
    bptt: int = 35
    lr: float = 20.0
    wdecay: float = 8e-7
    clip: float = 0.25
    dropout: float = 0.75
    dropouth: float = 0.25
    dropoutx: float = 0.75
    dropouti: float = 0.2
    dropoute: float = 0.1
    ar: float = 0.0  # DARTS retrains with AR off (alpha = 0); AWD-LSTM uses 2
    tar: float = 1e-3
    max_batches_per_epoch: int | None = None
    eval_batches: int | None = None
    device: str = "cpu"
    precision: str = "fp32"
    command: str = ""

    @classmethod
    def from_dict(cls: type[C], stored: dict, **limits: Any) -> C:
        """A run directory's config.json (keys this version does not know are ignored), with the
        limits given on the command line (those not None) put in place of the stored ones."""
        config = cls(**{f.name: stored[f.name] for f in fields(cls) if f.name in stored})
        return replace(config, **{k: v for k, v in limits.items() if v is not None})

    def splits(self) -> dict[str, Path]:
        return {"train": Path(self.train), "valid": Path(self.valid), "test": Path(self.test)}

    def _at_least_one(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{_flag(name)}: must be at least 1, got {value}")

    def _dropouts_below_one(self) -> None:
        for name in ("dropout", "dropouth", "dropoutx", "dropouti", "dropoute"):
            if not 0 <= getattr(self, name) < 1:
                raise InputError(f"--{name}: must be in [0, 1), got {getattr(self, name)}")


@dataclass
class SearchConfig(LMConfig):
    """Every knob of a search; the defaults are DARTS's PTB search settings (NOTES §3)."""

    epochs: int = 50
    seed: int = 3
    emsize: int = 300
    nhid: int = 300
    batch_size: int = 256
    wdecay: float = 5e-7
    dropoute: float = 0.0
    method: str = "darts"
    order: int = 1
    nodes: int = 8
    arch_lr: float = 3e-3
    arch_wdecay: float = 1e-3
    top_n: int = 1
    compile: bool = False
    extra: dict = field(default_factory=dict)
    # ESS (paper 000) and NASABN (paper 004)
    search_space: str = "joint"
    rounds: int = 50
    intra_steps: int | None = None  # None: half an epoch, so a round is about one pass over train
    inter_steps: int | None = None
    arch_lr_intra: float = 3e-3
    arch_lr_inter: float = 1e-3
    history: int = 3
    inter_nodes: int = 3
    gate_squash: str = "sigmoid"
    gate_size_match: str = "project"
    cell: dict | None = None  # the fixed intra cell (genotype dict) of an inter-only search
    attention: str = "none"
    attention_heads: int = 4

    @property
    def total_epochs(self) -> int:
        """Epochs of the loop, counted by the method's own setting (ESS: rounds)."""
        return getattr(self, METHODS[self.method].epochs)

    def validate(self) -> None:
        """The first inconsistent setting, as an InputError naming its flag."""
        if self.method not in METHODS:
            raise InputError(f"--method: unknown method {self.method!r} (one of {', '.join(METHODS)})")
        self._at_least_one("epochs", "rounds", "nodes", "emsize", "nhid", "batch_size", "eval_batch_size", "bptt",
                           "top_n", "history", "inter_nodes", "attention_heads", "intra_steps", "inter_steps")
        if self.history > self.inter_nodes:
            raise InputError(f"--history {self.history}: needs at least as many --inter-nodes (got {self.inter_nodes}); "
                             "gate node i reads history vector i")
        if (self.search_space == "inter") != (self.cell is not None):
            raise InputError("--cell: give the fixed intra cell exactly when --search-space is inter")
        self._dropouts_below_one()
        if self.emsize != self.nhid:
            raise InputError(f"--emsize {self.emsize} and --nhid {self.nhid} must be equal: "
                             "the decoder is tied to the embedding")


def check_method_flags(method: str, given: dict[str, Any]) -> None:
    """Flags given (not None) that do not fit `method`: another method's settings, or ones it counts otherwise."""
    own = METHODS[method].options
    for name in (n for entry in METHODS.values() for n in entry.options):
        if name not in own and given.get(name) is not None:
            owners = " or ".join(m for m, entry in METHODS.items() if name in entry.options)
            raise InputError(f"{_flag(name)}: only with --method {owners}")
    for name, why in METHODS[method].refuses.items():
        if given.get(name) is not None:
            raise InputError(f"{_flag(name)}: {why}")


@dataclass
class RetrainConfig(LMConfig):
    """Every knob of retraining a cell (or the LSTM baseline) from scratch; the defaults are DARTS's PTB settings (NOTES §5)."""

    cell: str = "darts_v2"  # as given: a shipped cell name, a genotype file, or "lstm"
    genotype: dict | None = None  # the resolved cell (None for lstm): a resume needs no file
    match_cell: str | None = None  # lstm: nhid was chosen to match the parameter count of this cell's layer
    match_rnn_params: int | None = None  # ... which is this many
    time_budget: float | None = None  # minutes of training and validation, over resumes
    test_batch_size: int = 1
    seq_len_std: float = 5.0
    max_seq_len_delta: int = 20
    nonmono: int = 5
    max_rollbacks: int = 5

    @property
    def kind(self) -> str:
        return "lstm" if self.cell == "lstm" else "cell"

    def validate(self) -> None:
        """The first out-of-range setting, as an InputError naming its flag."""
        self._at_least_one("epochs", "emsize", "nhid", "batch_size", "eval_batch_size", "test_batch_size", "bptt",
                           "nonmono", "max_batches_per_epoch", "eval_batches")
        for name in ("max_rollbacks", "max_seq_len_delta", "seq_len_std", "lr", "wdecay", "ar", "tar"):
            if getattr(self, name) < 0:
                raise InputError(f"{_flag(name)}: must not be negative, got {getattr(self, name)}")
        self._dropouts_below_one()
        if self.clip <= 0:
            raise InputError(f"--clip: must be positive, got {self.clip}")
        if self.time_budget is not None and not self.time_budget > 0:
            raise InputError(f"--time-budget: must be a positive number of minutes, got {self.time_budget}")
