"""Every setting of a tagger training run, its defaults (Jiang et al. 2019 §3.2, the I-DARTS tagger) and its checks.

A light module (no flair, no torch), so `bin/train-tagger --help` shows the defaults at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nas.common.devices import GEMM_BACKENDS, PRECISIONS, backend_problem, device_problem, precision_problem
from nas.common.devices import STORED_CHOICES
from nas.common.errors import InputError
from nas.common.ranges import (
    BATCH,
    EPOCHS,
    FACTOR,
    MANY,
    MINUTES,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    RATE,
    SEED,
    SIZE,
    THREADS,
    Range,
    check_ranges,
)

# How a cell's weights start (tagger.model.cell_init_range): lstm ±1/√hidden, darts ±0.04
CELL_INITS = ("lstm", "darts")
# The optimiser of the training (tagger.train.optimizer_class): SGD as the papers, or AdamW (decoupled weight decay,
# torch's default 0.01)
OPTIMIZERS = ("sgd", "adamw")
# How the learning rate moves: anneal, × --anneal-factor on a dev plateau and a stop below --min-lr (the papers,
# flair's `train`); linear, warm-up over a fraction of the steps, then linear decay to 0 (flair's `fine_tune`)
SCHEDULERS = ("anneal", "linear")
SGD_LR = 0.1  # the papers' (Jiang et al. 2019 §3.2)
# Fine-tuning a transformer (--fine-tune-embeddings) as flair's `ModelTrainer.fine_tune` does by default: AdamW, the
# transformer at 5e-5, a linear schedule warming up over 10% of the steps, 10 epochs. One deviation, the head: flair's
# lr is the transformer's (decoder_learning_rate unset), which leaves a BiRNN-CRF head untrained (6 F1 after an epoch of
# CoNLL-2000 in docs/experiments/training-options); it gets 5e-3, the AdamW lr this head was measured to train at.
FINE_TUNE = {"optimizer": "adamw", "embeddings_lr": 5e-5, "lr": 5e-3, "scheduler": "linear", "max_epochs": 10}
WARMUP_FRACTION = 0.1
MAX_EPOCHS = 150  # with the annealing, which usually stops sooner


@dataclass
class TaggerConfig:
    """`bin/train-tagger`'s flags; the defaults follow I-DARTS (Jiang et al. 2019 §3.2) / Akbik et al. 2019."""

    cell: str = "darts_v2"
    corpus: str = "conll03"
    data: str = ""
    columns: str | None = None
    tag_column: str | None = None
    tag_scheme: str | None = None
    train_scheme: str = "bioes"
    embeddings: str = "glove:glove-6b-50d"
    pooling: str = "min"
    charlm_states: str | None = None  # a folder where frozen character-LM states are saved and reused (charlm_states)
    hidden_size: int = 512
    match_params: str | None = None  # as given: a cell to match flair's LSTM to, or lstm:H to match a cell to
    matched_to: dict | None = None  # resolved: {"cell", "hidden_size", "rnn_parameters"} of the layer matched
    locked_dropout: float = 0.5
    word_dropout: float = 0.05
    dropout_x: float = 0.0
    dropout_h: float = 0.0
    cell_init: str = "lstm"
    reproject: bool = True
    word_vocab: int = 100_000  # word vectors kept: the corpus's words and this many of the file's first (0: all)
    save_final_model: bool = False  # final-model.pt beside best-model.pt (always kept when it is the model tested)
    # Left unset (None), the next five follow the optimiser and --fine-tune-embeddings (check() fills them in): SGD,
    # lr 0.1, annealing, 150 epochs; with --fine-tune-embeddings, FINE_TUNE. AdamW without fine-tuning needs its lr.
    optimizer: str | None = None
    lr: float | None = None  # the whole model's, or the tagger's head's where embeddings_lr is the transformer's
    embeddings_lr: float | None = None  # the fine-tuned transformer's lr (None: lr)
    scheduler: str | None = None
    warmup_fraction: float | None = None  # the linear schedule's warm-up: this fraction of all steps
    batch_size: int = 32
    eval_batch_size: int = 64
    max_epochs: int | None = None
    anneal_factor: float = 0.25
    patience: int = 2
    min_lr: float = 1e-4
    clip: float = 5.0
    train_with_dev: bool = False
    time_budget: float | None = None  # minutes; see train.EpochTimer
    seed: int = 1
    runs: int = 1
    device: str = "cpu"
    threads: int | None = None
    precision: str = "fp32"  # bf16: the training step under torch.autocast (nas.common.runs.autocast)
    fine_tune_embeddings: bool = False  # the transformer: embeddings trained with the tagger
    gemm: str = "auto"  # nas.fast.gemm.use; a run stores what auto resolved to (a run stored without it: auto)
    backend: str = "auto"  # nas.fast.backends.use; a run stores what auto resolved to (a run stored without it: auto)
    preset: str | None = None  # nas.common.presets: the flags it set are recorded with the others
    command: str = ""

    # The allowed values of the numeric settings: check() tests them, bin/train-tagger's flag types come from them.
    RANGES: ClassVar[dict[str, Range]] = {
        "hidden_size": SIZE,
        "batch_size": BATCH,
        "eval_batch_size": BATCH,
        "max_epochs": EPOCHS,
        "runs": MANY,
        "threads": THREADS,
        "seed": SEED,
        **dict.fromkeys(("locked_dropout", "word_dropout", "dropout_x", "dropout_h"), RATE),
        "lr": POSITIVE,
        "embeddings_lr": POSITIVE,
        "warmup_fraction": RATE,
        "clip": POSITIVE,
        "min_lr": NON_NEGATIVE,
        "anneal_factor": FACTOR,
        "patience": NON_NEGATIVE_INT,
        "time_budget": MINUTES,
        "word_vocab": NON_NEGATIVE_INT,
    }

    # The settings of a choice checked in a stored config.json (nas.common.ranges.check_stored)
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        **STORED_CHOICES,
        "optimizer": OPTIMIZERS,
        "scheduler": SCHEDULERS,
        "cell_init": CELL_INITS,
    }

    def check(self) -> None:
        """Every check bin/train-tagger makes, in its words (the command and `tagger.train_tagger` both run it): each
        number in its declared range, a device this machine has, settings that work together. The settings left
        unset (None) that follow the optimiser are then filled in, so the object says what will run."""
        check_ranges(self, self.RANGES)
        if self.cell_init not in CELL_INITS:
            raise InputError(f"--cell-init {self.cell_init}: expected one of {', '.join(CELL_INITS)}")
        problem = device_problem(self.device)
        if problem:
            raise InputError(f"--device: {problem}")
        self._check_embedding_settings()
        self._fill_optimiser_settings()
        if self.precision not in PRECISIONS or precision_problem(self.device, self.precision):
            raise InputError(f"--precision {self.precision}: {precision_problem(self.device, self.precision)}")
        if self.gemm not in GEMM_BACKENDS:
            raise InputError(f"--gemm {self.gemm}: expected one of {', '.join(GEMM_BACKENDS)}")
        problem = backend_problem(self.backend, self.device)
        if problem:
            raise InputError(problem)
        if self.match_params is not None:
            self.match_reference()

    def _check_embedding_settings(self) -> None:
        """--pooling, --fine-tune-embeddings and --embeddings-lr only with the embeddings they act on."""
        from .embeddings import parse_spec

        kinds = [kind for kind, _ in parse_spec(self.embeddings)]
        if self.pooling != "min" and "pooled-flair" not in kinds:
            raise InputError(
                f"--pooling: only with pooled-flair embeddings; with --embeddings {self.embeddings} it has no effect"
            )
        if self.fine_tune_embeddings and "transformer" not in kinds:
            raise InputError(
                f"--fine-tune-embeddings: only with a transformer: item in --embeddings (got "
                f"{self.embeddings}); word vectors and character LMs stay frozen"
            )
        if self.embeddings_lr is not None and not self.fine_tune_embeddings:
            raise InputError(
                f"--embeddings-lr {self.embeddings_lr:g}: only with --fine-tune-embeddings (frozen embeddings have no "
                "learning rate)"
            )

    def _fill_optimiser_settings(self) -> None:
        """The optimiser, the schedule, the learning rates, the warm-up and the epochs left unset (None), filled in
        as the optimiser (and fine-tuning) has them, after checking they work together."""
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise InputError(f"--optimizer {self.optimizer}: expected one of {', '.join(OPTIMIZERS)}")
        if self.scheduler is not None and self.scheduler not in SCHEDULERS:
            raise InputError(f"--scheduler {self.scheduler}: expected one of {', '.join(SCHEDULERS)}")
        defaults = FINE_TUNE if self.fine_tune_embeddings else {"optimizer": "sgd", "scheduler": "anneal"}
        optimizer = self.optimizer or defaults["optimizer"]
        if optimizer == "adamw" and self.lr is None and not self.fine_tune_embeddings:
            raise InputError(
                f"--optimizer adamw: give its --lr (the default {SGD_LR:g} is SGD's; AdamW diverges at it): e.g. --lr "
                "5e-3"
            )
        scheduler = self.scheduler or defaults["scheduler"]
        if self.warmup_fraction is not None and scheduler != "linear":
            raise InputError(f"--warmup-fraction {self.warmup_fraction:g}: only with --scheduler linear")
        self.optimizer, self.scheduler = optimizer, scheduler
        if self.lr is None:
            self.lr = FINE_TUNE["lr"] if self.fine_tune_embeddings and optimizer == "adamw" else SGD_LR
        if self.embeddings_lr is None and self.fine_tune_embeddings and optimizer == "adamw":
            self.embeddings_lr = FINE_TUNE["embeddings_lr"]
        if scheduler == "linear" and self.warmup_fraction is None:
            self.warmup_fraction = WARMUP_FRACTION
        if self.max_epochs is None:
            self.max_epochs = FINE_TUNE["max_epochs"] if scheduler == "linear" else MAX_EPOCHS
        if scheduler == "anneal" and min(self.lr, self.embeddings_lr or self.lr) < self.min_lr:
            low = min(self.lr, self.embeddings_lr or self.lr)
            flag = "--lr" if low == self.lr else "--embeddings-lr"
            raise InputError(
                f"{flag} {low:g}: below --min-lr {self.min_lr:g}, where the training stops at once; "
                f"give a lower --min-lr (e.g. {low / 1000:g}), or --scheduler linear"
            )

    def match_reference(self) -> tuple[str, int]:
        """(cell, hidden size) of the layer `--match-params` matches: CELL at --hidden-size for
        `--cell lstm`, else flair's LSTM at H (`lstm:H`)."""
        spec, lstm = self.match_params or "", self.cell.lower() == "lstm"
        if spec.lower().startswith("lstm:"):
            if lstm:
                raise InputError(
                    f"--match-params {spec}: sizes a cell like an LSTM; with --cell lstm give the cell "
                    "to match, e.g. --match-params darts_v2"
                )
            try:
                hidden = int(spec[5:])
            except ValueError:
                hidden = 0
            if hidden < 1:
                raise InputError(f"--match-params {spec}: expected lstm:H with H a hidden size of at least 1")
            return "lstm", hidden
        if not lstm or spec.lower() == "lstm" or not spec:
            raise InputError(
                f"--match-params {spec}: give a cell to size flair's LSTM like it (--cell lstm "
                "--match-params darts_v2), or lstm:H to size --cell like an LSTM of hidden size H"
            )
        return spec, self.hidden_size
