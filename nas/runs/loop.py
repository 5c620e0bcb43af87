"""The one training loop every run is on: the LM search (`nas.runs.search`), retraining (`nas.runs.train`) and
the search on a tagging task (`tagger.tagging_search`).

`TrainingLoop` owns what every run shares: epochs of batches, the stop flag (Ctrl-C writes a
checkpoint at the next batch boundary and raises `Interrupted`), the checkpoint, `--resume`, a
time budget, rollback to the last checkpoint after a diverged batch (`Diverged`), the ranks' agreement
on every decision that ends a loop and their checksum at each epoch end (`nas.common.distributed`), and
progress, reported to a `Progress` (it prints nothing). `LMLoop` adds a language model's data and
weight step: batches of the training split at a sampled sequence length with the hidden state
carried on, and SGD (lr scaled by seq_len / bptt, NLL + AR + TAR, gradients averaged over ranks
and clipped).

A run supplies, by overriding the hooks below: its model and optimiser, its per-batch step, its
validation and epoch record, its state for the checkpoint, and what it returns at the end. The
checkpoint holds the RNG states and the position in the epoch, so a resumed run ends exactly
where an uninterrupted one would.

Nothing half-written stays (`nas.common.runs`): the run directory is made once the corpus is read and
the model built; a run that fails before its first checkpoint past the start removes it; an
epoch's log line is written before its checkpoint and a resume trims the log to the checkpoint;
a resume of a run killed before it wrote any checkpoint starts it afresh from its config.json.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict
from typing import Any, Callable, TypeVar

import torch

from nas.common.errors import InputError, WriteRefused
from nas.common.runs import Interrupted, RunDir, StopFlag, autocast, rng_state, set_rng_state
from nas.lm.corpus import Corpus, batchify
from nas.lm.evaluation import get_batch
from nas.lm.model import detach_hidden, regularised_loss
from nas.common import distributed
from nas.runs.config import LMConfig

L = TypeVar("L", bound="LMLoop")


class Diverged(Exception):
    """The loss or the gradient norm of a batch, or a validation loss, is NaN or infinite; or a language
    model's training NLL on a batch is beyond twice a uniform guess's, which a training that still learns
    never reaches (at a high lr the weights can blow up while every number stays finite)."""


class Progress:
    """What a loop reports while it runs; the commands draw a bar and print lines from it. Reports nothing itself."""

    def epoch_started(self, loop: "TrainingLoop", batches: int) -> None:
        """An epoch of `batches` batches begins (or goes on after a resume at `loop.batch`)."""

    def batch_done(self, loop: "TrainingLoop") -> None:
        """A batch has stepped; `loop.totals` holds the epoch's tokens and seconds so far."""

    def batches_ended(self, loop: "TrainingLoop") -> None:
        """The epoch's batches are done; validation comes next."""

    def epoch_done(self, loop: "TrainingLoop", record: dict) -> None:
        """The epoch is validated, checkpointed and logged as `record`."""

    def rolled_back(self, loop: "TrainingLoop", problem: str) -> None:
        """`problem` (a non-finite number) sent the run back to its last checkpoint, now loaded."""


class TrainingLoop:
    """One run in one run directory. Subclasses set `model` and implement the hooks that raise
    NotImplementedError. `config` needs `seed`, `device` and `epochs`."""

    noun = "run"  # what the run is called in its messages

    def __init__(self, config: Any, run_dir: RunDir, time_budget: float | None = None, max_rollbacks: int = 0):
        self.config, self.run_dir = config, run_dir
        self.time_budget, self.max_rollbacks = time_budget, max_rollbacks  # minutes; rollbacks before giving up
        self.ranks = distributed.current()  # data parallel under torchrun: this rank's batch columns
        self.device = self.ranks.device(config.device)
        torch.manual_seed(config.seed)
        self.py_rng = random.Random(config.seed)
        self.epoch, self.batch = 0, 0
        self.totals = self.fresh_totals()
        self.rollbacks = 0
        self.kept = False  # a checkpoint past the start is on disk, or the run was resumed: never discard it
        self.elapsed = 0.0  # seconds of training and validation in finished epochs (over resumes where saved)
        self.stop = StopFlag()
        self.progress = Progress()

    # -- hooks -------------------------------------------------------------------------------

    @property
    def epochs(self) -> int:
        """The epoch the run ends after."""
        return self.config.epochs

    def fresh_totals(self) -> dict:
        """The epoch's running sums, which the epoch record reads; `tokens` and `seconds` at least."""
        return {"tokens": 0, "seconds": 0.0}

    def begin_epoch(self) -> None:
        """Before an epoch's batches, or before the rest of them after a resume (`batch` > 0)."""

    def train_batch(self) -> int | None:
        """Train on the next batch; returns the tokens it held (over all ranks), or None when the data
        ran out before `epoch_limit`. Raise `Diverged` on a bad batch (a non-finite one before its step
        touches the weights: a rollback restores them anyway)."""
        raise NotImplementedError

    def end_epoch(self) -> None:
        """After an epoch is validated and counted, before its log line and checkpoint."""

    def validate(self) -> float:
        """The validation score at the end of an epoch (before `epoch` counts it)."""
        raise NotImplementedError

    def epoch_record(self, valid: float, seconds: float) -> dict:
        """The log line of the epoch just counted in `epoch` (`valid`: its validation score); `seconds`
        of training and validation."""
        raise NotImplementedError

    def state(self) -> dict:
        """Everything a resume needs (`position()` included), as tensors and plain containers."""
        raise NotImplementedError

    def restore_state(self, state: dict) -> None:
        raise NotImplementedError

    def finish(self) -> Any:
        """What `run` returns once the last epoch is done."""
        raise NotImplementedError

    def giving_up(self, problem: str) -> str:
        """The error line when `problem` ends the run (more than `max_rollbacks` rollbacks)."""
        raise NotImplementedError

    def batches_per_epoch(self) -> int:
        """Batches an epoch is shown as."""
        raise NotImplementedError

    def stopped_early(self) -> bool:
        """True once the run's own rule ends it before `epochs` (a search's DARTS-ES); checked at each epoch end."""
        return False

    def epoch_limit(self) -> int | None:
        """The batch count that ends an epoch before the data does (None: only the data's end)."""
        return self.batches_per_epoch()

    # -- state -------------------------------------------------------------------------------

    def position(self) -> dict:
        """Where the run stands in its epoch."""
        return {"batch": self.batch, "totals": dict(self.totals), "rng": rng_state(self.py_rng)}

    def load_position(self, state: dict) -> None:
        self.batch, self.totals = state["batch"], dict(state["totals"])
        set_rng_state(state["rng"], self.py_rng)

    def load_state(self, state: dict) -> None:
        """Continue from `state` (a checkpoint); one that does not fit this run is an InputError, and a
        corpus changed since the run began is said so (not a tensor size mismatch)."""
        vocab = getattr(self.corpus, "vocab", None)  # an LM corpus's (a tagging search's corpus has none)
        stored = state.get("vocab") if isinstance(state, dict) else None  # a retraining's checkpoint holds it
        if isinstance(stored, list) and vocab is not None and stored != vocab:
            if len(stored) != len(vocab):
                raise InputError(
                    self._corpus_changed(f"its vocabulary is now {len(vocab)} words, the run's {len(stored)}")
                )
            at = next(k for k, (then, now) in enumerate(zip(stored, vocab)) if then != now)
            raise InputError(
                self._corpus_changed(
                    f"its vocabulary differs from the run's at word {at + 1} ({stored[at]!r} then, {vocab[at]!r} now)"
                )
            )
        try:
            self.restore_state(state)
        except (KeyError, TypeError, RuntimeError, ValueError) as err:
            if vocab is not None and "size mismatch" in str(err) and "encoder.weight" in str(err):  # a row per word
                raise InputError(
                    self._corpus_changed(f"its vocabulary is now {len(vocab)} words, not the run's")
                ) from None
            raise InputError(
                f"{self.run_dir.checkpoint}: checkpoint does not match this {self.noun} "
                f"({' '.join(str(err).split())[:200]})"
            ) from None

    def _corpus_changed(self, how: str) -> str:
        return (
            f"{self.run_dir.checkpoint}: the corpus changed since the run began: {how} "
            f"({self.corpus.paths['train']}); resume with the files it started with, or start a new run"
        )

    def start(self, afresh: bool = False) -> None:
        """A fresh run: config.json and an epoch-0 checkpoint (the rollback target of the first epoch)."""
        self.run_dir.start(asdict(self.config), afresh, checkpoint=self.state())

    def resume(self) -> None:
        """Continue from the checkpoint; config.json holds the limits the run now goes on to from its
        next checkpoint on. A run killed before it wrote a checkpoint starts afresh."""
        self.kept = True
        if not self.run_dir.checkpoint.is_file():
            self.start(afresh=True)
            return
        self.run_dir.clean_temp_files()
        self.load_state(self.run_dir.load_checkpoint(map_location=self.device))
        self.run_dir.trim_log(self.epoch)
        if self.ranks.main:  # written with the resume's first checkpoint (nas.common.runs)
            self.run_dir.defer_config(asdict(self.config))

    def save_checkpoint(self) -> None:
        self.run_dir.save_checkpoint(self.state())
        self.kept = True

    def kept_note(self) -> str:
        """What a failure leaves on disk, for its error line."""
        if self.kept:
            return f"the last good checkpoint in {self.run_dir.path} is kept"
        return f"nothing was kept: no epoch had finished, and {self.run_dir.path} is removed"

    # -- loop --------------------------------------------------------------------------------

    def out_of_time(self, running: float = 0.0) -> bool:
        budget = self.time_budget
        return budget is not None and self.ranks.any(self.elapsed + running >= budget * 60)

    def run(self, progress: Progress | None = None, on_batch: Callable[[Any], None] | None = None) -> Any:
        """Train until `epochs` or the time budget; `on_batch(self)` after every batch. Returns `finish()`."""
        self.progress = progress or Progress()
        try:
            with self.stop:
                while self.epoch < self.epochs and not self.out_of_time() and not self.stopped_early():
                    try:
                        self._train_epoch(on_batch)
                        self._end_epoch()
                    except Diverged as bad:
                        self._roll_back(str(bad))
            return self.finish()
        except WriteRefused as refused:
            if not self.kept:
                self.run_dir.discard()
            raise WriteRefused(f"{refused}; {self.kept_note()}") from None
        except BaseException:
            if not self.kept:
                self.run_dir.discard()
            raise

    def _train_epoch(self, on_batch: Callable[[Any], None] | None) -> None:
        self.begin_epoch()
        self.model.train()
        self.progress.epoch_started(self, self.batches_per_epoch())
        limit = self.epoch_limit()
        while limit is None or self.batch < limit:
            start = time.perf_counter()
            tokens = self.train_batch()
            if tokens is None:
                break
            self.batch += 1
            self.totals["tokens"] += tokens
            self.totals["seconds"] += time.perf_counter() - start
            self.progress.batch_done(self)
            if on_batch is not None:
                on_batch(self)
            if self.ranks.any(self.stop.requested):
                self.save_checkpoint()
                raise Interrupted(
                    f"stopped in epoch {self.epoch + 1} after batch {self.batch}; "
                    f"continue with --resume {self.run_dir.path}"
                )
            if self.out_of_time(self.totals["seconds"]):
                break  # the budget ends this epoch early; it is still validated and logged
        self.progress.batches_ended(self)

    def _end_epoch(self) -> None:
        self.ranks.check_in_sync(self.model, f"at the end of epoch {self.epoch + 1}")
        start = time.perf_counter()
        valid = self.validate()
        seconds = self.totals["seconds"] + time.perf_counter() - start
        self.elapsed += seconds
        self.epoch += 1
        record = self.epoch_record(valid, seconds)
        self.batch = 0
        self.end_epoch()
        self.totals = self.fresh_totals()
        self.run_dir.log(record)  # before the checkpoint: a resume trims the log to the checkpoint's epochs
        self.save_checkpoint()
        self.progress.epoch_done(self, record)

    def _roll_back(self, problem: str) -> None:
        n = self.rollbacks + 1
        if n > self.max_rollbacks:
            raise InputError(self.giving_up(problem))
        spent = self.elapsed + self.totals["seconds"]
        self.load_state(self.run_dir.load_checkpoint(map_location=self.device))
        self.rollbacks = n
        self.elapsed = spent - self.totals["seconds"]  # time lost to the failed batches still counts
        torch.manual_seed(self.config.seed + 7919 * n)  # fresh dropout masks and sequence lengths for the retry
        self.py_rng.seed(f"{self.config.seed}/rollback/{n}")
        self.progress.rolled_back(self, problem)


class LMLoop(TrainingLoop):
    """A language model's run: batches of the training split (this rank's columns) at a sampled
    sequence length, the hidden state carried from batch to batch, and `weight_step`. Subclasses set
    `weights` (the parameters the weight step trains), `optimizer` and `valid_data`."""

    def __init__(
        self,
        config: LMConfig,
        run_dir: RunDir,
        corpus: Corpus,
        time_budget: float | None = None,
        max_rollbacks: int = 0,
    ):
        super().__init__(config, run_dir, time_budget, max_rollbacks)
        self.corpus = corpus
        train = batchify(corpus.train, config.batch_size, config.bptt, corpus.paths["train"])
        self.train_data = self.ranks.columns(train).to(self.device)
        self.diverged_nll = 2 * math.log(len(corpus.vocab))  # nats: the vocabulary size squared as perplexity
        self.pos = 0
        self.hidden = None

    @classmethod
    def open(cls: type[L], config: LMConfig, run_dir: RunDir, resume: bool) -> L:
        """The run in `run_dir`, started fresh or resumed from its checkpoint; under torchrun every
        rank joins the process group first, and only rank 0 writes."""
        ranks = distributed.init(config.device)
        if resume:
            _check_splits(config, run_dir)
        loop = cls(config, ranks.run_dir(run_dir), Corpus.load(config.splits()))
        if resume:
            loop.resume()
        else:
            loop.start()
        return loop

    @property
    def wraps(self) -> bool:
        """True: an epoch runs on through the end of the data, which starts again (ESS rounds)."""
        return False

    def sample_seq_len(self) -> int:
        raise NotImplementedError

    def step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        """Train on one batch (at least `weight_step`); raise `Diverged` on a bad batch."""
        raise NotImplementedError

    def reset_hidden(self) -> None:
        """Fresh hidden states at the start of an epoch."""
        self.hidden = self.model.init_hidden(self.train_data.size(1))

    def full_epoch(self) -> int:
        """Batches of one pass over the training split at the full bptt."""
        return math.ceil((self.train_data.size(0) - 2) / self.config.bptt)

    def batches_per_epoch(self) -> int:
        """Batches an epoch is shown as: one pass, at most --max-batches-per-epoch."""
        cap = self.config.max_batches_per_epoch
        return self.full_epoch() if cap is None else min(self.full_epoch(), cap)

    def fresh_totals(self) -> dict:
        return {"nll": 0.0, "tokens": 0, "seconds": 0.0}

    def epoch_lr(self) -> float:
        """The SGD lr of this epoch's weight steps at the full bptt."""
        return self.config.lr

    def begin_epoch(self) -> None:
        if self.pos == 0 and self.batch == 0:
            self.reset_hidden()

    def train_batch(self) -> int | None:
        if self.pos >= self.train_data.size(0) - 2:
            if not self.wraps:
                return None
            self.pos, self.hidden = 0, self.model.init_hidden(self.train_data.size(1))
        seq_len = self.sample_seq_len()
        words, targets = get_batch(self.train_data, self.pos, seq_len)
        self.step(words, targets, seq_len)
        self.pos += seq_len
        return targets.numel() * self.ranks.world

    def end_epoch(self) -> None:
        if not self.wraps:
            self.pos = 0

    def position(self) -> dict:
        """Where the run stands in its epoch (a collective under torchrun: the hidden states of all columns)."""
        return {"pos": self.pos, **super().position(), "hidden": self.ranks.gather_columns(self.hidden)}

    def load_position(self, state: dict) -> None:
        super().load_position(state)
        self.pos, self.hidden = state["pos"], self.ranks.columns(state["hidden"])

    def weight_step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        """One SGD step of `weights` on a train batch, carrying the hidden state on.

        The lr is scaled by seq_len / bptt (the DARTS/AWD code); the loss is NLL + AR + TAR,
        averaged over ranks with the gradients; the gradient norm is clipped. A non-finite
        loss or gradient norm raises `Diverged` before the weights change.
        """
        self.set_lr(seq_len)
        loss, loss_value, nll, hidden = self.weight_loss(words, targets, self.hidden)
        self.check_finite(loss_value, "loss")
        norm = self.weight_grads(loss)
        self.check_finite(norm, "gradient norm")
        self.optimizer.step()
        self.hidden = detach_hidden(hidden)
        self.count_nll(nll, targets)

    def set_lr(self, seq_len: int) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.epoch_lr() * seq_len / self.config.bptt

    def weight_loss(self, words: torch.Tensor, targets: torch.Tensor, hidden) -> tuple[torch.Tensor, ...]:
        """(loss, its value and the NLL averaged over ranks, next hidden state) of the weight step."""
        c = self.config
        with autocast(self.device, c.precision):
            logits, hidden, raw, dropped = self.model(words, detach_hidden(hidden))
            loss, nll = regularised_loss(logits, targets, raw, dropped, c.ar, c.tar, self.model.backend)
        loss_value, nll_value = self.ranks.average((loss.detach(), nll.detach()))
        return loss, loss_value, nll_value, hidden

    def weight_grads(self, loss: torch.Tensor) -> torch.Tensor:
        """The weights' gradients of `loss`, averaged over ranks and clipped; returns their norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=self.weights)
        self.ranks.average_gradients(self.weights)
        return torch.nn.utils.clip_grad_norm_(self.weights, self.config.clip)

    def weight_update(self, words: torch.Tensor, targets: torch.Tensor, hidden) -> tuple[torch.Tensor, ...]:
        """The weight step without its checks, for a recorded step (`nas.fast.graphs`): the lr set
        beforehand, the step taken whatever the loss; returns (loss, NLL, gradient norm, next hidden)
        for the caller to check after the replay (a rollback restores the weights)."""
        loss, loss_value, nll, hidden = self.weight_loss(words, targets, hidden)
        norm = self.weight_grads(loss)
        self.optimizer.step()
        return loss_value, nll, norm, detach_hidden(hidden)

    def check_finite(self, value: torch.Tensor, what: str) -> None:
        """`Diverged` naming the batch when `value` is not finite."""
        if not torch.isfinite(value):
            raise Diverged(f"{what} became {value.item()} in epoch {self.epoch + 1}, batch {self.batch + 1}")

    def count_nll(self, nll: torch.Tensor, targets: torch.Tensor) -> None:
        """Add the batch's NLL to the epoch's; `Diverged` when it is beyond `diverged_nll`."""
        value = nll.item()
        if value > self.diverged_nll:
            raise Diverged(
                f"the training diverged in epoch {self.epoch + 1}, batch {self.batch + 1}: NLL {value:.4g} nats "
                f"a word, beyond {self.diverged_nll:.2f} (twice a uniform guess's over the {len(self.corpus.vocab)} "
                "words)"
            )
        self.totals["nll"] += value * targets.numel() * self.ranks.world


def _check_splits(config: LMConfig, run_dir: RunDir) -> None:
    """The corpus files a resumed run's config.json names must still be there."""
    for split, path in config.splits().items():
        if not path.is_file():
            where = "" if path.is_absolute() else " (a relative path: resume from the folder the run was started in)"
            raise InputError(f"{run_dir.path / 'config.json'}: its {split} file {path} is missing{where}")
