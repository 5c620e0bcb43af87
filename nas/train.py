"""Retraining a cell (or the LSTM baseline) from scratch under the DARTS/AWD evaluation protocol (NOTES §5).

Per batch: a sequence length drawn from N(bptt, 5) (from N(bptt/2, 5) with probability 0.05, as the
AWD and DARTS code do), at least 5 and at most bptt + `max_seq_len_delta`, with the learning rate
scaled by seq_len / bptt; loss = NLL + AR + TAR; gradients clipped; SGD. At each epoch end the
model is validated; once validation is worse than the best of all epochs before the last
`nonmono` (AWD's non-monotone trigger), SGD becomes ASGD (t0 = 0, lambd = 0) and every later
validation, the best model and the test use ASGD's averaged weights.

`Trainer` owns one run directory: `checkpoint.pt` (the last state, written after every epoch and on
Ctrl-C at a batch boundary, so `--resume` ends exactly where an uninterrupted run would) and
`best.pt` (the best validated model). Both are self-contained model files (`nas.lm_file`).

A non-finite loss or gradient norm is caught before the step touches the weights. The run rolls
back to `checkpoint.pt`, the last good state (the reference code rolls back to its only file, the
best model; keeping a last checkpoint loses at most one epoch), reseeds so the retried batches
differ, and gives up after `max_rollbacks` rollbacks with a one-line error, leaving the
checkpoint as it was.
"""
from __future__ import annotations

import math
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import click
import torch

from .corpus import Corpus, batchify
from .distributed import current
from common.errors import InputError
from .lm_file import LMSpec, build_lm, count_parameters, load_model_file, model_file
from .model import RNNModel, detach_hidden, regularised_loss
from common.runs import Interrupted, RunDir, StopFlag, autocast, rng_state, set_rng_state
from .search import evaluate, get_batch, ppl

MIN_SEQ_LEN = 5  # AWD/DARTS floor on the sampled sequence length
HALF_BPTT_PROB = 0.05  # AWD/DARTS: the mean sequence length is bptt/2 for 5% of the batches


@dataclass
class TrainConfig:
    """Every knob of a retraining run; the defaults are DARTS's PTB settings (NOTES §5)."""

    train: str = ""
    valid: str = ""
    test: str = ""
    cell: str = "darts_v2"  # as given: a shipped cell name, a genotype file, or "lstm"
    genotype: dict | None = None  # the resolved cell (None for lstm): a resume needs no file
    match_cell: str | None = None  # lstm: nhid was chosen to match the parameter count of this cell's layer
    match_rnn_params: int | None = None  # ... which is this many
    epochs: int = 8000  # an upper limit: DARTS trains for thousands of epochs
    time_budget: float | None = None  # minutes of training and validation, over resumes
    seed: int = 1267
    emsize: int = 850
    nhid: int = 850
    batch_size: int = 64
    eval_batch_size: int = 10
    test_batch_size: int = 1
    bptt: int = 35
    seq_len_std: float = 5.0
    max_seq_len_delta: int = 20
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
    nonmono: int = 5
    max_rollbacks: int = 5
    max_batches_per_epoch: int | None = None
    eval_batches: int | None = None
    device: str = "cpu"
    precision: str = "fp32"
    command: str = ""

    @property
    def kind(self) -> str:
        return "lstm" if self.cell == "lstm" else "cell"

    def spec(self, ntoken: int) -> LMSpec:
        return LMSpec(self.kind, ntoken, self.emsize, self.nhid, self.genotype, self.dropout, self.dropouth,
                      self.dropoutx, self.dropouti, self.dropoute)


class NonFinite(Exception):
    """The loss or the gradient norm of a batch is NaN or infinite."""


def make_optimizer(kind: str, model: torch.nn.Module, lr: float, wdecay: float) -> torch.optim.Optimizer:
    if kind == "ASGD":
        return torch.optim.ASGD(model.parameters(), lr=lr, t0=0, lambd=0.0, weight_decay=wdecay)
    return torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wdecay)


def optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    return "ASGD" if isinstance(optimizer, torch.optim.ASGD) else "SGD"


@contextmanager
def averaged_weights(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Under ASGD, hold its running averages (`ax`) in the model, as AWD/DARTS evaluate; no-op under SGD."""
    live = []
    if isinstance(optimizer, torch.optim.ASGD):
        with torch.no_grad():
            for p in model.parameters():
                ax = optimizer.state.get(p, {}).get("ax")
                if ax is not None:
                    live.append((p, p.detach().clone()))
                    p.copy_(ax)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, value in live:
                p.copy_(value)


def load_for_evaluation(path: str | Path, device: str | torch.device = "cpu") -> tuple[RNNModel, dict]:
    """A model file ready to evaluate: a resumable checkpoint caught under ASGD gets its averaged weights."""
    model, data = load_model_file(path, device)
    state = data.get("train")
    if state and state.get("optimizer_kind") == "ASGD":
        optimizer = make_optimizer("ASGD", model, 1.0, 0.0)
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (KeyError, ValueError) as err:
            raise InputError(f"{path}: optimiser state is damaged ({str(err)[:200]})") from None
        with torch.no_grad():
            for p in model.parameters():
                if "ax" in optimizer.state.get(p, {}):
                    p.copy_(optimizer.state[p]["ax"])
    return model, data


class Trainer:
    def __init__(self, config: TrainConfig, run_dir: RunDir, corpus: Corpus):
        self.config, self.run_dir, self.corpus = config, run_dir, corpus
        c = config
        self.ranks = current()  # data parallel under torchrun: this rank's batch columns (nas.distributed)
        self.device = self.ranks.device(c.device)
        torch.manual_seed(c.seed)
        self.py_rng = random.Random(c.seed)
        paths = corpus.paths
        self.train_data = self.ranks.columns(batchify(corpus.train, c.batch_size, c.bptt, paths["train"])).to(self.device)
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, paths["valid"]).to(self.device)
        self.test_data = batchify(corpus.test, c.test_batch_size, 1, paths["test"]).to(self.device)
        self.spec = c.spec(len(corpus.vocab))
        self.model = build_lm(self.spec).to(self.device)
        self.optimizer = make_optimizer("SGD", self.model, c.lr, c.wdecay)
        self.epoch, self.pos, self.batch = 0, 0, 0
        self.hidden = None
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.val_history: list[float] = []  # validation NLL of the SGD epochs (AWD's trigger looks at these)
        self.best_valid, self.best_epoch = math.inf, 0
        self.rollbacks = 0
        self.elapsed = 0.0  # seconds of training and validation in finished epochs, over resumes
        self.stop = StopFlag()

    # -- state -------------------------------------------------------------------------------

    def parameters(self) -> int:
        return count_parameters(self.model)

    def rnn_parameters(self) -> int:
        return count_parameters(self.model.rnn)

    def _file(self, state_dict: dict, **extra) -> dict:
        return model_file(self.spec, self.corpus.vocab, state_dict, config=asdict(self.config), **extra)

    def state(self) -> dict:
        train = {"optimizer_kind": optimizer_kind(self.optimizer), "optimizer": self.optimizer.state_dict(),
                 "pos": self.pos, "batch": self.batch, "hidden": self.ranks.gather_columns(self.hidden),
                 "totals": dict(self.totals),
                 "val_history": list(self.val_history), "best_valid": self.best_valid,
                 "best_epoch": self.best_epoch, "rollbacks": self.rollbacks, "elapsed": self.elapsed,
                 "rng": rng_state(self.py_rng)}
        return self._file(self.model.state_dict(), epoch=self.epoch, train=train)

    def load_state(self, data: dict) -> None:
        try:
            train = data["train"]
            self.model.load_state_dict(data["state_dict"])
            self.optimizer = make_optimizer(train["optimizer_kind"], self.model, self.config.lr, self.config.wdecay)
            self.optimizer.load_state_dict(train["optimizer"])
            self.epoch, self.pos, self.batch = data["epoch"], train["pos"], train["batch"]
            self.hidden, self.totals = self.ranks.columns(train["hidden"]), dict(train["totals"])
            self.val_history = list(train["val_history"])
            self.best_valid, self.best_epoch = train["best_valid"], train["best_epoch"]
            self.rollbacks, self.elapsed = train["rollbacks"], train["elapsed"]
            set_rng_state(train["rng"], self.py_rng)
        except (KeyError, TypeError, RuntimeError, ValueError) as err:
            raise InputError(f"{self.run_dir.checkpoint}: checkpoint does not match this run "
                             f"({str(err).splitlines()[0][:200]})") from None

    def start(self) -> None:
        """A fresh run: config and an epoch-0 checkpoint (the rollback target of the first epoch)."""
        self.run_dir.start(asdict(self.config))
        self.run_dir.save_checkpoint(self.state())

    def resume(self) -> None:
        self.load_state(self.run_dir.load_checkpoint(map_location=self.device))
        self.run_dir.trim_log(self.epoch)

    # -- loop --------------------------------------------------------------------------------

    def out_of_time(self, running: float = 0.0) -> bool:
        budget = self.config.time_budget
        return budget is not None and self.ranks.any(self.elapsed + running >= budget * 60)

    def run(self, on_batch: Callable[["Trainer"], None] | None = None) -> dict:
        """Train until `epochs` or the time budget; returns metrics.json (test of the best model)."""
        with self.stop:
            while self.epoch < self.config.epochs and not self.out_of_time():
                try:
                    self._train_epoch(on_batch)
                    self._end_epoch()
                except NonFinite as bad:
                    self._roll_back(str(bad))
        return self.finish()

    def sample_seq_len(self) -> int:
        c = self.config
        mean = c.bptt if self.py_rng.random() >= HALF_BPTT_PROB else c.bptt / 2
        return min(max(MIN_SEQ_LEN, int(self.py_rng.gauss(mean, c.seq_len_std))), c.bptt + c.max_seq_len_delta)

    def batches_per_epoch(self) -> int:
        full = math.ceil((self.train_data.size(0) - 2) / self.config.bptt)
        cap = self.config.max_batches_per_epoch
        return full if cap is None else min(full, cap)

    def _train_epoch(self, on_batch) -> None:
        c = self.config
        if self.pos == 0 and self.batch == 0:
            self.hidden = self.model.init_hidden(self.train_data.size(1))
        self.model.train()
        cap = c.max_batches_per_epoch
        with click.progressbar(length=self.batches_per_epoch(), label=f"epoch {self.epoch + 1}", file=sys.stderr,
                               item_show_func=lambda s: s) as bar:
            bar.update(self.batch)
            while self.pos < self.train_data.size(0) - 2 and (cap is None or self.batch < cap):
                start = time.perf_counter()
                seq_len = self.sample_seq_len()
                words, targets = get_batch(self.train_data, self.pos, seq_len)
                self._step(words, targets, seq_len)
                self.pos += seq_len
                self.batch += 1
                self.totals["tokens"] += targets.numel() * self.ranks.world
                self.totals["seconds"] += time.perf_counter() - start
                bar.update(1, f"{self.totals['tokens'] / max(self.totals['seconds'], 1e-9):,.0f} tok/s")
                if on_batch is not None:
                    on_batch(self)
                if self.ranks.any(self.stop.requested):
                    self.run_dir.save_checkpoint(self.state())
                    raise Interrupted(f"stopped in epoch {self.epoch + 1} after batch {self.batch}; "
                                      f"continue with --resume {self.run_dir.path}")
                if self.out_of_time(self.totals["seconds"]):
                    break  # the budget ends this epoch early; it is still validated and logged

    def _step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        c = self.config
        for group in self.optimizer.param_groups:
            group["lr"] = c.lr * seq_len / c.bptt
        with autocast(self.device, c.precision):
            logits, hidden, raw, dropped = self.model(words, detach_hidden(self.hidden))
            loss, nll = regularised_loss(logits, targets, raw, dropped, c.ar, c.tar)
        where = f"in epoch {self.epoch + 1}, batch {self.batch + 1}"
        loss_value, nll_value = self.ranks.average((loss.detach(), nll.detach()))
        if not torch.isfinite(loss_value):
            raise NonFinite(f"loss became {loss_value.item()} {where}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.ranks.average_gradients(self.model.parameters())
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.clip)
        if not torch.isfinite(norm):
            raise NonFinite(f"gradient norm became {norm.item()} {where}")
        self.optimizer.step()
        self.hidden = detach_hidden(hidden)
        self.totals["nll"] += nll_value.item() * targets.numel() * self.ranks.world

    def _end_epoch(self) -> None:
        c = self.config
        self.ranks.check_in_sync(self.model, f"at the end of epoch {self.epoch + 1}")
        start = time.perf_counter()
        kind = optimizer_kind(self.optimizer)
        with averaged_weights(self.model, self.optimizer):
            valid_nll = evaluate(self.model, self.valid_data, c.bptt, c.eval_batches)
            if not math.isfinite(valid_nll):
                raise NonFinite(f"validation loss became {valid_nll} after epoch {self.epoch + 1}")
            if valid_nll < self.best_valid:
                self.best_valid, self.best_epoch = valid_nll, self.epoch + 1
                self.run_dir.save_checkpoint(self._file(self.model.state_dict(), epoch=self.epoch + 1,
                                                        valid_ppl=ppl(valid_nll)), "best.pt")
        if kind == "SGD":
            history = self.val_history
            if len(history) > c.nonmono and valid_nll > min(history[:-c.nonmono]):
                self.optimizer = make_optimizer("ASGD", self.model, c.lr, c.wdecay)
            history.append(valid_nll)
        t = self.totals
        seconds = t["seconds"] + time.perf_counter() - start
        self.elapsed += seconds
        self.epoch += 1
        record = {"epoch": self.epoch, "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)), "valid_ppl": ppl(valid_nll),
                  "lr": c.lr, "optimizer": kind, "batches": self.batch, "seconds": seconds,
                  "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9), "elapsed": self.elapsed,
                  "rollbacks": self.rollbacks}
        self.pos, self.batch = 0, 0
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.run_dir.save_checkpoint(self.state())
        self.run_dir.log(record)
        switched = " (switching to ASGD)" if kind != optimizer_kind(self.optimizer) else ""
        click.echo(f"epoch {self.epoch}: train ppl {record['train_ppl']:.2f}  valid ppl {record['valid_ppl']:.2f}  "
                   f"{kind}{switched}  {record['tokens_per_s']:,.0f} tok/s  {seconds:.0f} s", err=True)

    def _roll_back(self, problem: str) -> None:
        c, n = self.config, self.rollbacks + 1
        path = self.run_dir.checkpoint
        if n > c.max_rollbacks:
            raise InputError(f"{problem}, and {c.max_rollbacks} rollbacks did not help; {path} holds the last "
                             f"good state (lower --lr or --clip, then --resume)")
        spent = self.elapsed + self.totals["seconds"]
        self.load_state(self.run_dir.load_checkpoint(map_location=self.device))
        self.rollbacks = n
        self.elapsed = spent - self.totals["seconds"]  # time lost to the failed batches still counts
        torch.manual_seed(c.seed + 7919 * n)  # fresh dropout masks and sequence lengths for the retry
        self.py_rng.seed(f"{c.seed}/rollback/{n}")
        click.echo(f"{problem}: rolled back to {path} (epoch {self.epoch}, batch {self.batch}); "
                   f"rollback {n} of at most {c.max_rollbacks}", err=True)

    def finish(self) -> dict:
        """Test the best model and write metrics.json (rank 0; the other ranks return {})."""
        c = self.config
        if not self.ranks.main:
            return {}
        best = self.run_dir.path / "best.pt"
        model, _ = load_model_file(best, self.device)
        test_nll = evaluate(model, self.test_data, c.bptt)
        metrics = {
            "cell": (c.genotype or {}).get("name") or c.cell,
            "kind": c.kind, "genotype": c.genotype, "params": self.parameters(), "rnn_params": self.rnn_parameters(),
            "emsize": c.emsize, "nhid": c.nhid, "best_valid_ppl": ppl(self.best_valid), "best_epoch": self.best_epoch,
            "test_ppl": ppl(test_nll), "test_batch_size": c.test_batch_size, "eval_batch_size": c.eval_batch_size,
            "epochs": self.epoch, "seconds": self.elapsed, "optimizer": optimizer_kind(self.optimizer),
            "rollbacks": self.rollbacks, "model": str(best),
        }
        if c.match_cell:
            metrics["matched_to"] = {"cell": c.match_cell, "rnn_params": c.match_rnn_params}
        self.run_dir.save_metrics(metrics)
        return metrics
