"""The settings of a cell search on the tagging task (`bin/search-tagger`) and their checks.

Light on purpose (no torch, no flair), so `--help` and a bad flag answer at once. The tagger's
settings keep `bin/train-tagger`'s names and defaults, except the hidden size: I-DARTS searched
its NER cell at 256 (Jiang et al. 2019 §3.1). The search settings are DARTS's (Liu et al. 2019);
the methods' own settings come from their dataclasses (`nas.methods.settings`), as in `SearchConfig`:
ESS's, random search's and ENAS's as fields (`nas.methods.flat_fields`), the others under
`method_settings`; `search_settings` hands the method the `SearchSettings` it reads.
The search's health (HEALTH_SETTINGS: the Hessian check and DARTS-ES) keeps `bin/search-lm`'s names,
defaults and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from nas.common.devices import STORED_CHOICES
from nas.common.errors import InputError
from nas.common.ranges import check_ranges, check_stored
from nas.methods import flat_fields, flat_ranges, flat_setting_names, method_settings, search_settings
from nas.methods.settings import SearchSettings
from nas.common.flags import flag_name
from nas.runs.config import SearchConfig, check_early_stop, check_gate_history
from tagger.config import SGD_LR, TaggerConfig

T = TaggerConfig  # train-tagger's defaults
S = SearchConfig  # search-lm's defaults of the search's health
# The methods' settings kept as config fields that the tagging search takes: every one but ESS's
# --cell and --rounds (the tagging search has no inter-only search space, and counts ESS rounds as
# --epochs). Each is a field (from `flat_fields`, with its method's default), and a flag copied from search-lm.
NOT_TAKEN = ("cell", "rounds")
METHOD_SETTINGS = tuple(name for name in flat_setting_names() if name not in NOT_TAKEN)

HEALTH_SETTINGS = (
    "hessian_iterations",
    "early_stop",
    "early_stop_window",
    "early_stop_ratio",
)  # bin/search-lm's, the same


@dataclass
class TaggingSearchConfig(flat_fields("TaggingMethodSettings", leave_out=NOT_TAKEN)):
    # the tagger, as bin/train-tagger takes it
    corpus: str = ""
    data: str = ""
    columns: str | None = None
    tag_column: str | None = None
    tag_scheme: str | None = None
    train_scheme: str = T.train_scheme
    embeddings: str = T.embeddings
    pooling: str = T.pooling
    hidden_size: int = 256
    locked_dropout: float = T.locked_dropout
    word_dropout: float = T.word_dropout
    dropout_x: float = T.dropout_x
    dropout_h: float = T.dropout_h
    reproject: bool = T.reproject
    lr: float = SGD_LR
    batch_size: int = T.batch_size
    eval_batch_size: int = T.eval_batch_size
    clip: float = T.clip
    # the search
    method: str = "darts"
    order: int = 1
    nodes: int = 8
    top_n: int = 1
    arch_lr: float = 3e-3
    arch_wdecay: float = 1e-3
    arch_split: float = 0.5
    epochs: int = 40
    max_batches_per_epoch: int | None = None
    time_budget: float | None = None  # minutes of training and validation, over resumes
    max_rollbacks: int = 0  # rollbacks to the last checkpoint after a non-finite loss before giving up
    seed: int = 1
    # the search's health (nas.runs.health), as bin/search-lm's
    hessian_iterations: int = S.hessian_iterations
    early_stop: str = S.early_stop
    early_stop_window: int = S.early_stop_window
    early_stop_ratio: float = S.early_stop_ratio
    # the methods' own: ESS's, random search's and ENAS's are the fields of the base class
    method_settings: dict = field(
        default_factory=dict
    )  # {}: the method's defaults (a run from before they were stored)
    device: str = T.device
    threads: int | None = None
    gemm: str = T.gemm  # nas.fast.gemm.use; a run stores what auto resolved to (a run stored without it: auto)
    backend: str = (
        T.backend
    )  # nas.fast.backends.use; a run stores what auto resolved to (a run stored without it: auto)
    command: str = ""

    @classmethod
    def from_dict(cls, stored: dict, **limits: Any) -> "TaggingSearchConfig":
        """A run directory's config.json, with the limits given on the command line (not None) in place."""
        config = cls(**{f.name: stored[f.name] for f in fields(cls) if f.name in stored})
        return replace(config, **{k: v for k, v in limits.items() if v is not None})

    @classmethod
    def from_file(cls, path: Path, stored: dict, **limits: Any) -> "TaggingSearchConfig":
        """`from_dict` of a config.json read from `path`, checked field by field: a key it does not know
        (another command's config, or an edit) and a setting out of range name the file, not a flag."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(stored) - known)
        if unknown:
            raise InputError(
                f"{path}: {unknown[0]!r} is not a setting of bin/search-tagger (a config of another "
                "command, or edited?)"
            )
        check_stored(cls, stored, str(path), STORED_CHOICES)
        config = cls.from_dict(stored, **limits)
        try:
            config.check()
        except InputError as err:
            raise InputError(f"{path}: a stored setting is out of range ({err})") from None
        return config

    def tagger(self) -> TaggerConfig:
        """The tagger settings as `tagger.train.build_model` reads them."""
        return TaggerConfig(**{f.name: getattr(self, f.name) for f in fields(TaggerConfig) if hasattr(self, f.name)})

    def search_settings(self, input_size: int) -> SearchSettings:
        """The settings the search method reads, for a layer of `input_size` inputs and --hidden-size units:
        the weights step as flair's trainer does (no weight decay), candidates score on all the held-apart
        sentences, no attention, no fixed cell."""
        return search_settings(
            self,
            emsize=input_size,
            nhid=self.hidden_size,
            dropoutx=self.dropout_x,
            dropouth=self.dropout_h,
            wdecay=0.0,
            eval_batches=None,
            attention_heads=S.attention_heads,
        )

    def check(self) -> None:
        """The first setting out of range, as an InputError naming its flag."""
        self.tagger().check()
        for name in ("nodes", "top_n", "epochs", "max_batches_per_epoch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
        if self.batch_size < 2:
            raise InputError(
                f"--batch-size: the search cell's BatchNorm needs at least 2 sentences a batch, got {self.batch_size}"
            )
        if self.time_budget is not None and self.time_budget <= 0:
            raise InputError(f"--time-budget: must be positive, got {self.time_budget}")
        if self.max_rollbacks < 0:
            raise InputError(f"--max-rollbacks: must be at least 0, got {self.max_rollbacks}")
        ranges = {name: allowed for name, allowed in flat_ranges().items() if name in METHOD_SETTINGS}
        ranges.update((name, SearchConfig.RANGES[name]) for name in HEALTH_SETTINGS if name in SearchConfig.RANGES)
        check_ranges(self, ranges, flag_name)
        check_early_stop(self.early_stop, self.hessian_iterations)
        if self.search_space == "inter":
            raise InputError(
                "--search-space inter: not on the tagging task (the gates around a fixed cell are "
                "searched with bin/search-lm); give intra or joint"
            )
        check_gate_history(self.history, self.inter_nodes)
        method_settings(self)
        if not 0 < self.arch_split < 1:
            raise InputError(f"--arch-split: must be a fraction of the training split in (0, 1), got {self.arch_split}")
