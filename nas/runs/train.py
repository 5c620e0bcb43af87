"""Retraining a cell (or the LSTM baseline) from scratch under the DARTS/AWD evaluation protocol (Liu et al. 2019;
DARTS's rnn/train.py).

Per batch: a sequence length drawn from N(bptt, 5) (from N(bptt/2, 5) with probability 0.05, as the
AWD and DARTS code do), at least 5 and at most bptt + `max_seq_len_delta`, with the learning rate
scaled by seq_len / bptt; loss = NLL + AR + TAR; gradients clipped; SGD. At each epoch end the
model is validated; once validation is worse than the best of all epochs before the last
`nonmono` (AWD's non-monotone trigger), SGD becomes ASGD (t0 = 0, lambd = 0) and every later
validation, the best model and the test use ASGD's averaged weights.

`Trainer` runs on the training loop (`nas.runs.loop`) and owns one run directory: `checkpoint.pt` (the last state,
written after every epoch and on
Ctrl-C at a batch boundary, so `--resume` ends exactly where an uninterrupted run would) and
`best.pt` (the best validated model). Both are self-contained model files (`nas.lm.model_file`).

A non-finite loss or gradient norm is caught before the step touches the weights, a training NLL
beyond twice a uniform guess's (`Diverged`) after it. The run rolls
back to `checkpoint.pt`, the last good state (the reference code rolls back to its only file, the
best model; keeping a last checkpoint loses at most one epoch), reseeds so the retried batches
differ, and gives up after `max_rollbacks` rollbacks with a one-line error, leaving the
checkpoint as it was.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import torch

from nas.cells.genotype import load
from nas.common.errors import InputError
from nas.common.parameters import count_parameters
from nas.common.runs import RunDir
from nas.lm.corpus import Corpus, batchify
from nas.common.stats import ppl
from nas.lm.evaluation import evaluate
from nas.lm.lstm import matching_nhid
from nas.lm.model import RNNModel
from nas.lm.model_file import LMSpec, build_lm, load_model_file, model_file, rnn_parameters
from nas.runs.config import RetrainConfig
from nas.runs.loop import LMLoop, Diverged
from nas import speed

MIN_SEQ_LEN = 5  # AWD/DARTS floor on the sampled sequence length
HALF_BPTT_PROB = 0.05  # AWD/DARTS: the mean sequence length is bptt/2 for 5% of the batches


def resolve_cell(config: RetrainConfig, nhid: int | None, match_cell: str) -> None:
    """Fix the genotype and nhid: a cell runs at nhid = emsize; the LSTM's nhid (unless given)
    matches the parameter count of `match_cell`'s layer."""
    if nhid is not None and nhid < 1:
        raise InputError(f"--nhid: must be at least 1, got {nhid}")
    if config.cell == "lstm":
        if nhid is None:
            config.match_cell = match_cell
            config.match_rnn_params = rnn_parameters("cell", load(match_cell), config.emsize, config.emsize)
            nhid = matching_nhid(config.emsize, config.match_rnn_params)
        config.nhid = nhid
        return
    config.genotype = load(config.cell).to_dict()
    if nhid is not None and nhid != config.emsize:
        raise InputError(
            f"--nhid {nhid} and --emsize {config.emsize} must be equal for a cell: the decoder is tied to the embedding"
        )
    config.nhid = config.emsize


def lm_spec(config: RetrainConfig, ntoken: int) -> LMSpec:
    c = config
    return LMSpec(
        c.kind, ntoken, c.emsize, c.nhid, c.genotype, c.dropout, c.dropouth, c.dropoutx, c.dropouti, c.dropoute
    )


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


class Trainer(LMLoop):
    def __init__(self, config: RetrainConfig, run_dir: RunDir, corpus: Corpus):
        super().__init__(config, run_dir, corpus, config.time_budget, config.max_rollbacks)
        c, paths = config, corpus.paths
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, paths["valid"], "--eval-batch-size").to(
            self.device
        )
        self.test_data = batchify(corpus.test, c.test_batch_size, 1, paths["test"], "--test-batch-size").to(self.device)
        self.spec = lm_spec(c, len(corpus.vocab))
        self.model = build_lm(self.spec, speed.of(c)).to(self.device)
        self.weights = list(self.model.parameters())
        self.optimizer = make_optimizer("SGD", self.model, c.lr, c.wdecay)
        self.val_history: list[float] = []  # validation NLL of the SGD epochs (AWD's trigger looks at these)
        self.best_valid, self.best_epoch = math.inf, 0
        self.epoch_optimizer = "SGD"  # the optimiser the epoch being validated trained with
        # on a GPU a cell's steps and validation chunks replay as CUDA graphs (cuDNN's LSTM is one kernel already)
        backend = self.model.backend
        records = c.kind == "cell" and backend.captures(self.device, self.ranks.parallel)
        self.graphs, self.eval_graphs = (backend.step_graphs(), backend.step_graphs()) if records else (None, None)

    # -- state -------------------------------------------------------------------------------

    def parameters(self) -> int:
        return count_parameters(self.model)

    def rnn_parameters(self) -> int:
        return count_parameters(self.model.rnn)

    def _file(self, state_dict: dict, **extra) -> dict:
        return model_file(self.spec, self.corpus.vocab, state_dict, config=asdict(self.config), **extra)

    def state(self) -> dict:
        train = {
            "optimizer_kind": optimizer_kind(self.optimizer),
            "optimizer": self.optimizer.state_dict(),
            **self.position(),
            "val_history": list(self.val_history),
            "best_valid": self.best_valid,
            "best_epoch": self.best_epoch,
            "rollbacks": self.rollbacks,
            "elapsed": self.elapsed,
        }
        return self._file(self.model.state_dict(), epoch=self.epoch, train=train)

    def restore_state(self, data: dict) -> None:
        train = data["train"]
        self.model.load_state_dict(data["state_dict"])
        optimizer = make_optimizer(train["optimizer_kind"], self.model, self.config.lr, self.config.wdecay)
        optimizer.load_state_dict(train["optimizer"])
        self.use_optimizer(optimizer)
        self.epoch = data["epoch"]
        self.load_position(train)
        self.val_history = list(train["val_history"])
        self.best_valid, self.best_epoch = train["best_valid"], train["best_epoch"]
        self.rollbacks, self.elapsed = train["rollbacks"], train["elapsed"]

    # -- loop --------------------------------------------------------------------------------

    def sample_seq_len(self) -> int:
        c = self.config
        mean = c.bptt if self.py_rng.random() >= HALF_BPTT_PROB else c.bptt / 2
        return min(max(MIN_SEQ_LEN, int(self.py_rng.gauss(mean, c.seq_len_std))), c.bptt + c.max_seq_len_delta)

    def epoch_limit(self) -> int | None:
        """An epoch runs to the end of the data (sequence lengths vary), or to --max-batches-per-epoch."""
        return self.config.max_batches_per_epoch

    def step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        """The weight step; with `graphs`, replayed per sequence length and optimiser, checked after it."""
        if self.graphs is None:
            return self.weight_step(words, targets, seq_len)
        self.set_lr(seq_len)
        key = (self.optimizer.param_groups[0]["lr"], optimizer_kind(self.optimizer))
        loss, nll, norm, self.hidden = self.graphs(key, self.weight_update, words, targets, self.hidden)
        self.check_finite(loss, "loss")
        self.check_finite(norm, "gradient norm")
        self.count_nll(nll, targets)

    def use_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """From now on step with `optimizer` (recorded steps of the last one forgotten)."""
        self.optimizer = optimizer
        if self.graphs is not None:
            self.graphs.clear()
            self.graphs.make_capturable(optimizer)

    def validate(self) -> float:
        """Validation NLL (under ASGD with its averaged weights); keeps the best model in best.pt and
        switches SGD to ASGD on AWD's non-monotone trigger."""
        c = self.config
        kind = optimizer_kind(self.optimizer)
        with averaged_weights(self.model, self.optimizer):
            valid_nll = evaluate(self.model, self.valid_data, c.bptt, c.eval_batches, graphs=self.eval_graphs)
            if not math.isfinite(valid_nll):
                raise Diverged(f"validation loss became {valid_nll} after epoch {self.epoch + 1}")
            if valid_nll < self.best_valid:
                self.best_valid, self.best_epoch = valid_nll, self.epoch + 1
                self.run_dir.save_checkpoint(
                    self._file(self.model.state_dict(), epoch=self.epoch + 1, valid_ppl=ppl(valid_nll)), "best.pt"
                )
        if kind == "SGD":
            history = self.val_history
            if len(history) > c.nonmono and valid_nll > min(history[: -c.nonmono]):
                self.use_optimizer(make_optimizer("ASGD", self.model, c.lr, c.wdecay))
            history.append(valid_nll)
        self.epoch_optimizer = kind
        return valid_nll

    def epoch_record(self, valid_nll: float, seconds: float) -> dict:
        t = self.totals
        return {
            "epoch": self.epoch,
            "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)),
            "valid_ppl": ppl(valid_nll),
            "lr": self.config.lr,
            "optimizer": self.epoch_optimizer,
            "batches": self.batch,
            "seconds": seconds,
            "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9),
            "elapsed": self.elapsed,
            "rollbacks": self.rollbacks,
        }

    def giving_up(self, problem: str) -> str:
        if not self.kept:
            return (
                f"{problem}, and {self.max_rollbacks} rollbacks did not help; {self.kept_note()} (lower --lr or --clip)"
            )
        return (
            f"{problem}, and {self.max_rollbacks} rollbacks did not help; {self.run_dir.checkpoint} holds the "
            f"last good state (lower --lr or --clip, then --resume)"
        )

    def finish(self) -> dict:
        """Test the best model and write metrics.json (rank 0; the other ranks return {})."""
        c = self.config
        if not self.ranks.main:
            return {}
        best = self.run_dir.path / "best.pt"
        model, _ = load_model_file(best, self.device, self.model.backend)  # the run's backend
        test_nll = evaluate(model, self.test_data, c.bptt)
        metrics = {
            "cell": (c.genotype or {}).get("name") or c.cell,
            "kind": c.kind,
            "genotype": c.genotype,
            "params": self.parameters(),
            "rnn_params": self.rnn_parameters(),
            "emsize": c.emsize,
            "nhid": c.nhid,
            "best_valid_ppl": ppl(self.best_valid),
            "best_epoch": self.best_epoch,
            "test_ppl": ppl(test_nll),
            "test_batch_size": c.test_batch_size,
            "eval_batch_size": c.eval_batch_size,
            "epochs": self.epoch,
            "seconds": self.elapsed,
            "optimizer": optimizer_kind(self.optimizer),
            "rollbacks": self.rollbacks,
            "model": str(best),
        }
        if c.match_cell:
            metrics["matched_to"] = {"cell": c.match_cell, "rnn_params": c.match_rnn_params}
        self.run_dir.save_metrics(metrics)
        return metrics
