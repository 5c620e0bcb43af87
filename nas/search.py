"""The bilevel DARTS / I-DARTS search loop (NOTES §3): α on validation batches, weights on train batches.

`Searcher` owns one run directory. Its state is written atomically after every epoch and when a
stop is requested (Ctrl-C), at a batch boundary, with the RNG states, carried hidden states and
the position in the epoch, so a resumed run ends exactly where an uninterrupted one would.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import click
import torch

from . import __version__
from .architect import Architect, split_parameters
from .corpus import Corpus, batchify
from .errors import InputError
from .genotype import Genotype
from .model import RNNModel, detach_hidden, lm_loss, regularised_loss
from .runs import Interrupted, RunDir, StopFlag, rng_state, set_rng_state
from .search_cell import SearchRNN, mean_abs_deviation


@dataclass
class SearchConfig:
    """Every knob of a search; the defaults are DARTS's PTB settings (NOTES §3)."""

    train: str = ""
    valid: str = ""
    test: str = ""
    method: str = "darts"
    order: int = 1
    epochs: int = 50
    seed: int = 3
    emsize: int = 300
    nhid: int = 300
    nodes: int = 8
    batch_size: int = 256
    eval_batch_size: int = 10
    bptt: int = 35
    lr: float = 20.0
    wdecay: float = 5e-7
    clip: float = 0.25
    dropout: float = 0.75
    dropouth: float = 0.25
    dropoutx: float = 0.75
    dropouti: float = 0.2
    dropoute: float = 0.0
    ar: float = 0.0
    tar: float = 1e-3
    arch_lr: float = 3e-3
    arch_wdecay: float = 1e-3
    top_n: int = 1
    max_batches_per_epoch: int | None = None
    eval_batches: int | None = None
    device: str = "cpu"
    compile: bool = False
    command: str = ""
    extra: dict = field(default_factory=dict)


def get_batch(source: torch.Tensor, i: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(seq_len, source.size(0) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len]


@torch.no_grad()
def evaluate(model: RNNModel, data: torch.Tensor, bptt: int, max_batches: int | None = None) -> float:
    """Mean token NLL over `data` (steps, batch), hidden carried across chunks; eval mode."""
    was_training = model.training
    model.eval()
    hidden = model.init_hidden(data.size(1))
    total, count = 0.0, 0
    for k, i in enumerate(range(0, data.size(0) - 1, bptt)):
        if max_batches is not None and k >= max_batches:
            break
        words, targets = get_batch(data, i, bptt)
        logits, hidden, _, _ = model(words, hidden)
        total += float(lm_loss(logits, targets)) * targets.numel()
        count += targets.numel()
    model.train(was_training)
    return total / count


def ppl(nll: float) -> float:
    return math.exp(min(nll, 700.0))


class Searcher:
    def __init__(self, config: SearchConfig, run_dir: RunDir, corpus: Corpus):
        self.config, self.run_dir, self.corpus = config, run_dir, corpus
        c = config
        self.device = torch.device(c.device)
        torch.manual_seed(c.seed)
        self.py_rng = random.Random(c.seed)
        self.train_data = batchify(corpus.train, c.batch_size, c.bptt, corpus.paths["train"]).to(self.device)
        self.search_data = batchify(corpus.valid, c.batch_size, c.bptt, corpus.paths["valid"]).to(self.device)
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, corpus.paths["valid"]).to(self.device)
        rnn = SearchRNN(c.emsize, c.nhid, c.nodes, c.method, c.dropoutx, c.dropouth, compile=c.compile)
        self.model = RNNModel(len(corpus.vocab), c.emsize, rnn, c.dropout, c.dropouti, c.dropoute).to(self.device)
        self.weights, _ = split_parameters(self.model)
        self.optimizer = torch.optim.SGD(self.weights.values(), lr=c.lr, weight_decay=c.wdecay)
        self.architect = Architect(self.model, c.arch_lr, c.arch_wdecay, c.order, c.wdecay)
        self.epoch, self.pos, self.batch = 0, 0, 0
        self.hidden = self.hidden_valid = None
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.stop = StopFlag()

    @property
    def rnn(self) -> SearchRNN:
        return self.model.rnn

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "architect": self.architect.optimizer.state_dict(), "epoch": self.epoch, "pos": self.pos,
                "batch": self.batch, "hidden": self.hidden, "hidden_valid": self.hidden_valid,
                "totals": dict(self.totals), "rng": rng_state(self.py_rng)}

    def load_state(self, state: dict) -> None:
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.architect.optimizer.load_state_dict(state["architect"])
            self.epoch, self.pos, self.batch = state["epoch"], state["pos"], state["batch"]
            self.hidden, self.hidden_valid, self.totals = state["hidden"], state["hidden_valid"], state["totals"]
            set_rng_state(state["rng"], self.py_rng)
        except (KeyError, RuntimeError, ValueError) as err:
            raise InputError(f"{self.run_dir.checkpoint}: checkpoint does not match this search ({str(err)[:200]})") from None

    def batches_per_epoch(self) -> int:
        full = math.ceil((self.train_data.size(0) - 2) / self.config.bptt)
        cap = self.config.max_batches_per_epoch
        return full if cap is None else min(full, cap)

    def run(self, on_batch: Callable[["Searcher"], None] | None = None) -> Genotype:
        """Search until `epochs`; returns the derived genotype (also written to the run directory)."""
        with self.stop:
            while self.epoch < self.config.epochs:
                self._train_epoch(on_batch)
                self._end_epoch()
        return self.final_genotype()

    def _train_epoch(self, on_batch) -> None:
        c, B = self.config, self.config.batch_size
        if self.pos == 0 and self.batch == 0:
            self.hidden, self.hidden_valid = self.model.init_hidden(B), self.model.init_hidden(B)
        self.model.train()
        total = self.batches_per_epoch()
        with click.progressbar(length=total, label=f"search epoch {self.epoch + 1}/{c.epochs}", file=sys.stderr,
                               item_show_func=lambda s: s) as bar:
            bar.update(self.batch)
            while self.pos < self.train_data.size(0) - 2 and self.batch < total:
                start = time.perf_counter()
                seq_len = c.bptt if self.py_rng.random() < 0.95 else c.bptt // 2
                words, targets = get_batch(self.train_data, self.pos, seq_len)
                vpos = self.pos % (self.search_data.size(0) - 1)
                valid = get_batch(self.search_data, vpos, seq_len)
                self._step(words, targets, valid, seq_len)
                self.pos += seq_len
                self.batch += 1
                self.totals["tokens"] += targets.numel()
                self.totals["seconds"] += time.perf_counter() - start
                bar.update(1, f"{self.totals['tokens'] / max(self.totals['seconds'], 1e-9):,.0f} tok/s")
                if on_batch is not None:
                    on_batch(self)
                if self.stop.requested:
                    self.run_dir.save_checkpoint(self.state())
                    raise Interrupted(f"stopped in epoch {self.epoch + 1} after batch {self.batch}; "
                                      f"continue with --resume {self.run_dir.path}")

    def _step(self, words: torch.Tensor, targets: torch.Tensor, valid, seq_len: int) -> None:
        c = self.config
        lr = c.lr * seq_len / c.bptt  # the DARTS code scales the lr by the sequence length
        self.hidden = detach_hidden(self.hidden)
        self.hidden_valid = detach_hidden(self.architect.step(
            (words, targets), self.hidden, valid, detach_hidden(self.hidden_valid), lr))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        logits, self.hidden, raw, dropped = self.model(words, self.hidden)
        loss, nll = regularised_loss(logits, targets, raw, dropped, c.ar, c.tar)
        if not torch.isfinite(loss):
            raise InputError(f"loss became {float(loss)} in epoch {self.epoch + 1}, batch {self.batch + 1}; "
                             f"the last good checkpoint in {self.run_dir.path} is kept (try a lower --lr)")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=list(self.weights.values()))
        torch.nn.utils.clip_grad_norm_(self.weights.values(), c.clip)
        self.optimizer.step()
        self.totals["nll"] += nll.item() * targets.numel()

    def _end_epoch(self) -> None:
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise InputError(f"weights became non-finite in epoch {self.epoch + 1}; "
                             f"the last good checkpoint in {self.run_dir.path} is kept")
        valid_nll = evaluate(self.model, self.valid_data, self.config.bptt, self.config.eval_batches)
        self.epoch += 1
        record = self.epoch_record(valid_nll)
        self.pos, self.batch = 0, 0
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.run_dir.save_checkpoint(self.state())
        self.run_dir.log(record)
        click.echo(f"epoch {record['epoch']}: train ppl {record['train_ppl']:.1f}  valid ppl "
                   f"{record['valid_ppl']:.1f}  {record['tokens_per_s']:,.0f} tok/s  "
                   f"genotype {record['genotype']}", err=True)

    def epoch_record(self, valid_nll: float) -> dict:
        weights = self.rnn.mixing_weights().detach()
        t = self.totals
        return {"epoch": self.epoch, "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)), "valid_ppl": ppl(valid_nll),
                "alpha": self.rnn.alpha.detach().cpu().tolist(),
                "mad": mean_abs_deviation(weights, self.rnn.steps, self.rnn.method),
                "genotype": self.rnn.genotype(self.config.top_n).to_dict()["nodes"],
                "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9), "seconds": t["seconds"]}

    def final_genotype(self) -> Genotype:
        log = self.run_dir.read_log()
        c = self.config
        geno = self.rnn.genotype(c.top_n)
        provenance = {
            "method": c.method, "order": c.order, "data": {k: str(v) for k, v in self.corpus.paths.items()},
            "seed": c.seed, "epochs": c.epochs, "command": c.command,
            "search_valid_ppl": log[-1]["valid_ppl"] if log else None,
            "settings": {k: v for k, v in asdict(c).items() if k not in ("command", "train", "valid", "test")},
            "toolkit_version": __version__, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(self.run_dir.path),
        }
        name = f"{c.method}_search_seed{c.seed}"
        return Genotype(geno.nodes, geno.concat, geno.inter, geno.attention, name, provenance)
