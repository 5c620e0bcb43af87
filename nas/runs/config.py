"""The settings of a search and of a retraining run, and their validation.

Light on purpose (no torch): the commands build their flags from these defaults and choices and
check a config before any work starts, so `--help` and a bad flag answer at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from nas.common.devices import GEMM_BACKENDS, STORED_CHOICES, backend_problem, device_problem
from nas.common.errors import InputError
from nas.common.flags import flag_name
from nas.common.ranges import (
    AT_LEAST_1,
    BATCH,
    EPOCHS,
    ITERATIONS,
    MINUTES,
    NODES,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    RATE,
    SEED,
    SIZE,
    Range,
    check_ranges,
    check_stored,
)
from nas.methods import flat_fields, flat_ranges
from nas.methods.settings import GATE_SIZE_MATCHES, GATE_SQUASHES, SEARCH_SPACES  # noqa: F401  (the flags' choices)

EARLY_STOPS = ("none", "hessian", "converged")  # nas.runs.health: EarlyStop (DARTS-ES), convergence (the rule)
ATTENTION_CHOICES = (
    "search",
    "dot",
    "multihead",
    "none",
)  # a searched mix, nas.cells.genotype.ATTENTION_TYPES, or none

C = TypeVar("C", bound="LMConfig")


@dataclass
class LMConfig:
    """The knobs of every language-model training run, search and retraining alike.

    The defaults are DARTS's PTB model (Liu et al. 2019, the DARTS code's rnn/train.py); a search overrides the sizes
    and the few
    settings DARTS searches with.
    """

    train: str = ""
    valid: str = ""
    test: str = ""
    epochs: int = 8000  # an upper limit: DARTS retrains for thousands of epochs
    seed: int = 1  # every command's default; the DARTS code seeds its search with 3 and its retraining with 1267
    # sizes
    emsize: int = 850
    nhid: int = 850
    batch_size: int = 64
    eval_batch_size: int = 10
    bptt: int = 35
    # the weight step: SGD
    lr: float = 20.0
    wdecay: float = 8e-7
    clip: float = 0.25
    # AWD-LSTM's dropouts: on the layer output, inside the cell (h, x), on the embeddings (locked, rows)
    dropout: float = 0.75
    dropouth: float = 0.25
    dropoutx: float = 0.75
    dropouti: float = 0.2
    dropoute: float = 0.1
    # activation regularisation
    ar: float = 0.0  # DARTS retrains with AR off (alpha = 0); AWD-LSTM uses 2
    tar: float = 1e-3
    max_batches_per_epoch: int | None = None
    eval_batches: int | None = None
    device: str = "cpu"
    precision: str = "fp32"
    gemm: str = "auto"  # nas.speed.resolve_gemm; a run stores what auto resolved to (a run stored without it: auto)
    backend: str = "auto"  # nas.speed.resolve; a run stores what auto resolved to (a run stored without it: auto)
    preset: str | None = None  # nas.common.presets: the flags it set are recorded with the others
    command: str = ""

    COMMAND: ClassVar[str] = ""  # the command that starts and resumes runs of this config
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = STORED_CHOICES
    # The allowed values of the numeric settings: validate() checks them, the commands' flag types come from them.
    RANGES: ClassVar[dict[str, Range]] = {
        "epochs": EPOCHS,
        **dict.fromkeys(("max_batches_per_epoch", "eval_batches"), AT_LEAST_1),
        "emsize": SIZE,
        "nhid": SIZE,
        "batch_size": BATCH,
        "eval_batch_size": BATCH,
        "bptt": BATCH,
        "seed": SEED,
        "lr": POSITIVE,
        "clip": POSITIVE,
        "wdecay": NON_NEGATIVE,
        "ar": NON_NEGATIVE,
        "tar": NON_NEGATIVE,
        **dict.fromkeys(("dropout", "dropouth", "dropoutx", "dropouti", "dropoute"), RATE),
    }

    @classmethod
    def from_dict(cls: type[C], stored: dict, source: Path | str = "config.json", **limits: Any) -> C:
        """A run directory's config.json (`source`; keys this version does not know are ignored), with
        the limits given on the command line (those not None) put in place of the stored ones. The
        config of the other command's run is an InputError naming `source`."""
        if _multi_seed(stored):
            folder = Path(source).parent
            raise InputError(
                f"{source}: a multi-seed run (bin/search-lm --seeds), which does not resume as a whole: "
                f"resume one seed's search with bin/search-lm --resume {folder}/seed-S/search, or its "
                f"retraining with bin/train-lm --resume {folder}/seed-S/retrain"
            )
        other = command_of(stored)
        if other not in (None, cls.COMMAND):
            raise InputError(
                f"{source}: the config of a {other} run, not of a {cls.COMMAND} run "
                f"(continue it with {other} --resume {Path(source).parent})"
            )
        check_stored(cls, stored, str(source), cls.CHOICES)  # field by field, before any is used
        config = cls(**{f.name: stored[f.name] for f in fields(cls) if f.name in stored})
        check_ranges(config, cls.RANGES, lambda name: f"{source}: setting {name!r}")  # the file's, not a flag's
        return replace(config, **{k: v for k, v in limits.items() if v is not None})

    def splits(self) -> dict[str, Path]:
        return {"train": Path(self.train), "valid": Path(self.valid), "test": Path(self.test)}

    def _check_values(self) -> None:
        """Every number in its declared range, and a device this machine has."""
        check_ranges(self, self.RANGES, flag_name)
        problem = device_problem(self.device)
        if problem:
            raise InputError(f"--device: {problem}")
        if self.gemm not in GEMM_BACKENDS:
            raise InputError(f"--gemm {self.gemm}: expected one of {', '.join(GEMM_BACKENDS)}")
        problem = backend_problem(self.backend, self.device)
        if problem:
            raise InputError(problem)


@dataclass
class SearchConfig(flat_fields("FlatMethodSettings"), LMConfig):
    """Every knob of a search; the defaults are DARTS's PTB search settings (Liu et al. 2019), but for the
    seed (1 as everywhere in this toolkit; the DARTS code's is 3). ESS's, random search's and ENAS's settings
    are fields too, from their dataclasses (`nas.methods.settings`: `EssSettings`, `RandomSearchSettings`,
    `EnasSettings`), as config.json has always kept them."""

    epochs: int = 50
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
    # the method's own settings (nas.methods.settings; {}: its defaults, as in a run from before they were stored)
    method_settings: dict = field(default_factory=dict)
    # NASABN (Jing et al. 2020)
    attention: str = "none"
    attention_heads: int = 4
    # search health (nas.runs.health): the Hessian eigenvalue each epoch, DARTS-ES, a time budget
    hessian_iterations: int = 20  # power iterations for the dominant eigenvalue of ∇²α L_val (0: not computed)
    early_stop: str = "none"  # "hessian": DARTS-ES (Zela et al. 2020); "converged": the convergence rule
    early_stop_window: int = 5  # DARTS-ES: k, the epochs of each window
    early_stop_ratio: float = 0.75  # DARTS-ES: stop when λ̄(e − k) / λ̄(e) falls below this
    time_budget: float | None = None  # minutes of training and validation, over resumes
    max_rollbacks: int = 0  # rollbacks to the last checkpoint after a non-finite loss before giving up
    # the weights' lr: constant in DARTS's search code; ENAS's PTB search decays it 0.95 an epoch from epoch 12
    lr_decay: float = 1.0  # factor per epoch (round) from lr_decay_start on
    lr_decay_start: int = 1  # the first epoch (round) whose lr is decayed

    COMMAND: ClassVar[str] = "bin/search-lm"
    RANGES: ClassVar[dict[str, Range]] = {
        **LMConfig.RANGES,
        **dict.fromkeys(("top_n", "attention_heads"), AT_LEAST_1),
        "nodes": NODES,
        "arch_lr": POSITIVE,
        "arch_wdecay": NON_NEGATIVE,
        **flat_ranges(),  # ESS's, random search's, ENAS's
        "hessian_iterations": ITERATIONS,
        "early_stop_window": AT_LEAST_1,
        "early_stop_ratio": Range(0, 1, low_open=True, high_open=True),
        "time_budget": MINUTES,
        "max_rollbacks": NON_NEGATIVE_INT,
        "lr_decay": Range(0, 1, low_open=True),
        "lr_decay_start": AT_LEAST_1,
    }

    def epoch_lr(self, epoch: int) -> float:
        """The weights' SGD lr in `epoch` (a round for ESS), counted from 1."""
        return self.lr * self.lr_decay ** max(0, epoch - self.lr_decay_start + 1)

    def validate(self) -> None:
        """The first inconsistent setting, as an InputError naming its flag."""
        self._check_values()
        check_gate_history(self.history, self.inter_nodes)
        if (self.search_space == "inter") != (self.cell is not None):
            raise InputError("--cell: give the fixed intra cell exactly when --search-space is inter")
        check_early_stop(self.early_stop, self.hessian_iterations)
        if self.emsize != self.nhid:
            raise InputError(
                f"--emsize {self.emsize} and --nhid {self.nhid} must be equal: the decoder is tied to the embedding"
            )


def check_early_stop(early_stop: str, hessian_iterations: int) -> None:
    """DARTS-ES (--early-stop hessian) reads each epoch's eigenvalue, so it needs --hessian-iterations."""
    if early_stop not in EARLY_STOPS:
        raise InputError(f"--early-stop {early_stop}: expected one of {', '.join(EARLY_STOPS)}")
    if early_stop == "hessian" and hessian_iterations == 0:
        raise InputError("--early-stop hessian: needs the eigenvalue, so --hessian-iterations at least 1")


def check_gate_history(history: int, inter_nodes: int) -> None:
    """ESS's gate node i reads history vector i, so a gate DAG needs at least --history nodes."""
    if history > inter_nodes:
        raise InputError(
            f"--history {history}: needs at least as many --inter-nodes (got {inter_nodes}); "
            "gate node i reads history vector i"
        )


def _multi_seed(stored: Any) -> bool:
    """The config.json of a multi-seed search (`nas.runs.seeds`), not of one command's run."""
    return isinstance(stored, dict) and "seeds" in stored and "search_args" in stored


def command_of(stored: Any) -> str | None:
    """The command whose run a stored config.json is: the one it records, else told by a setting only
    that command has (a tagger run's corpus: read as an LM run, it had no train file)."""
    if _multi_seed(stored):
        return None  # no command resumes it as a whole (see LMConfig.from_dict)
    command = stored.get("command") if isinstance(stored, dict) else None
    if isinstance(command, str) and command.split() and command.split()[0].startswith("bin/"):
        return command.split()[0]
    if isinstance(stored, dict) and "corpus" in stored:
        return "bin/train-tagger"
    if isinstance(stored, dict) and "method" in stored:
        return SearchConfig.COMMAND
    if isinstance(stored, dict) and "test_batch_size" in stored:
        return RetrainConfig.COMMAND
    return None


@dataclass
class RetrainConfig(LMConfig):
    """Every knob of retraining a cell (or the LSTM baseline) from scratch; the defaults are DARTS's PTB
    settings (Liu et al. 2019), but for the seed (1; the DARTS code's is 1267)."""

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

    COMMAND: ClassVar[str] = "bin/train-lm"
    RANGES: ClassVar[dict[str, Range]] = {
        **LMConfig.RANGES,
        "test_batch_size": BATCH,
        "nonmono": AT_LEAST_1,
        "max_rollbacks": NON_NEGATIVE_INT,
        "max_seq_len_delta": NON_NEGATIVE_INT,
        "seq_len_std": NON_NEGATIVE,
        "time_budget": MINUTES,
    }

    @property
    def kind(self) -> str:
        return "lstm" if self.cell == "lstm" else "cell"

    def validate(self) -> None:
        """The first out-of-range setting, as an InputError naming its flag."""
        self._check_values()
