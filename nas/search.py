"""The bilevel DARTS / I-DARTS / ESS search loop (NOTES §3, §6): α on validation batches, weights on train batches.

ESS (`method="ess"`) runs rounds (paper 000, Fig. 4): `intra_steps` batches step the intra-cell α
(and the attention α) with the inter-cell α frozen, then `inter_steps` batches step the inter-cell
α with the intra-cell α frozen; the weights train on every batch, and the data runs on across
rounds. A search space with one kind of α steps it on every batch of the same budget.

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
import torch.nn as nn
import torch.nn.functional as F

from . import __version__
from .architect import Architect, split_parameters
from .attention import SearchAttention, search_attention
from .cell import FrozenRNN
from .corpus import Corpus, batchify
from .distributed import current, sync_batch_norm
from common.errors import InputError
from .genotype import Genotype, validate
from .gates import InterGates
from .model import RNNModel, detach_hidden, regularised_loss
from common.runs import Interrupted, RunDir, StopFlag, autocast, rng_state, set_rng_state
from .ops import mean_abs_deviation
from .search_cell import SearchRNN

SEARCH_SPACES = ("intra", "inter", "joint")


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
    precision: str = "fp32"
    command: str = ""
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
        """Epochs of the loop; for ESS an epoch is a round."""
        return self.rounds if self.method == "ess" else self.epochs


def build_search_model(c: SearchConfig, ntoken: int) -> RNNModel:
    """The model a search trains: embedding → search layer (cell, ESS gates, attention) → tied decoder."""
    attention = search_attention(c.attention, c.nhid, c.attention_heads)
    inter = None
    if c.method == "ess" and c.search_space != "intra":
        inter = InterGates.search(c.emsize, c.nhid, c.history, c.inter_nodes, c.gate_squash, c.gate_size_match)
    if c.method == "ess" and c.search_space == "inter":
        cell = validate(c.cell, "--cell")
        rnn = FrozenRNN(Genotype(cell.nodes, cell.concat), c.emsize, c.nhid, 1, c.dropoutx, c.dropouth,
                        c.attention_heads, inter, attention)
    else:
        method = "darts" if c.method == "ess" else c.method  # ESS Eq. 4: a softmax per edge
        rnn = SearchRNN(c.emsize, c.nhid, c.nodes, method, c.dropoutx, c.dropouth, inter, attention, c.compile)
    return RNNModel(ntoken, c.emsize, rnn, c.dropout, c.dropouti, c.dropoute)


def derived_genotype(rnn: nn.Module, top_n: int = 1) -> Genotype:
    """The cell, gates and attention type a search layer stands for now."""
    cell = rnn.genotype(top_n) if isinstance(rnn, SearchRNN) else rnn.genotype
    inter = None if rnn.inter is None else rnn.inter.derive()
    attention = None if rnn.attention is None else rnn.attention.derive()
    return Genotype(cell.nodes, cell.concat, inter, attention)


def get_batch(source: torch.Tensor, i: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(seq_len, source.size(0) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len]


@torch.no_grad()
def token_losses(model: RNNModel, data: torch.Tensor, bptt: int,
                 max_batches: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(target ids, their NLL) over `data` (steps, batch), flattened; hidden carried across chunks; eval mode."""
    was_training = model.training
    model.eval()
    hidden = model.init_hidden(data.size(1))
    targets_seen, losses = [], []
    for k, i in enumerate(range(0, data.size(0) - 1, bptt)):
        if max_batches is not None and k >= max_batches:
            break
        words, targets = get_batch(data, i, bptt)
        logits, hidden, _, _ = model(words, hidden)
        losses.append(F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction="none"))
        targets_seen.append(targets.reshape(-1))
    model.train(was_training)
    return torch.cat(targets_seen), torch.cat(losses)


def evaluate(model: RNNModel, data: torch.Tensor, bptt: int, max_batches: int | None = None) -> float:
    """Mean token NLL over `data` (steps, batch), hidden carried across chunks; eval mode."""
    return float(token_losses(model, data, bptt, max_batches)[1].double().mean())


def ppl(nll: float) -> float:
    return math.exp(min(nll, 700.0))


class Searcher:
    def __init__(self, config: SearchConfig, run_dir: RunDir, corpus: Corpus):
        self.config, self.run_dir, self.corpus = config, run_dir, corpus
        c = config
        self.ranks = current()  # data parallel under torchrun: this rank's batch columns (nas.distributed)
        self.device = self.ranks.device(c.device)
        torch.manual_seed(c.seed)
        self.py_rng = random.Random(c.seed)
        train, valid = corpus.paths["train"], corpus.paths["valid"]
        self.train_data = self.ranks.columns(batchify(corpus.train, c.batch_size, c.bptt, train)).to(self.device)
        self.search_data = self.ranks.columns(batchify(corpus.valid, c.batch_size, c.bptt, valid)).to(self.device)
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, valid).to(self.device)
        self.model = sync_batch_norm(build_search_model(c, len(corpus.vocab))).to(self.device)
        self.weights, _ = split_parameters(self.model)
        self.optimizer = torch.optim.SGD(self.weights.values(), lr=c.lr, weight_decay=c.wdecay)
        self.architects = self._make_architects()
        half = math.ceil(self.full_epoch() / 2)
        self.round_steps = (c.intra_steps or half, c.inter_steps or half)
        self.epoch, self.pos, self.batch, self.steps_done = 0, 0, 0, 0
        self.hidden = self.hidden_valid = None
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.stop = StopFlag()

    @property
    def rnn(self) -> SearchRNN | FrozenRNN:
        return self.model.rnn

    def _make_architects(self) -> dict[str, Architect]:
        """One α optimiser per phase: `all` for DARTS/I-DARTS; `intra` and/or `inter` for ESS.

        The attention α steps with the intra-cell α, or with the inter-cell α when the intra cell is fixed.
        """
        c = self.config
        if c.method != "ess":
            return {"all": Architect(self.model, c.arch_lr, c.arch_wdecay, c.order, c.wdecay, weight_clip=c.clip)}
        _, arch = split_parameters(self.model)
        inter = [n for n in arch if ".inter." in n]
        attention = [n for n in arch if ".attention." in n]
        intra = [n for n in arch if n not in inter and n not in attention]
        phases = {"intra": (intra + attention if intra else [], c.arch_lr_intra),
                  "inter": (inter + ([] if intra else attention), c.arch_lr_inter)}
        return {phase: Architect(self.model, lr, c.arch_wdecay, c.order, c.wdecay, names, weight_clip=c.clip)
                for phase, (names, lr) in phases.items() if names}

    def phase(self) -> str:
        """The architect of this batch: in a round, `intra_steps` batches of intra, then inter."""
        if len(self.architects) == 1:
            return next(iter(self.architects))
        return "intra" if self.batch < self.round_steps[0] else "inter"

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "architects": {k: a.optimizer.state_dict() for k, a in self.architects.items()},
                "epoch": self.epoch, "pos": self.pos, "batch": self.batch, "steps": self.steps_done,
                "hidden": self.ranks.gather_columns(self.hidden),
                "hidden_valid": self.ranks.gather_columns(self.hidden_valid),
                "totals": dict(self.totals), "rng": rng_state(self.py_rng)}

    def load_state(self, state: dict) -> None:
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            for phase, architect in self.architects.items():
                architect.optimizer.load_state_dict(state["architects"][phase])
            self.epoch, self.pos, self.batch = state["epoch"], state["pos"], state["batch"]
            self.steps_done = state["steps"]
            self.hidden, self.hidden_valid = self.ranks.columns(state["hidden"]), self.ranks.columns(state["hidden_valid"])
            self.totals = state["totals"]
            set_rng_state(state["rng"], self.py_rng)
        except (KeyError, RuntimeError, ValueError) as err:
            raise InputError(f"{self.run_dir.checkpoint}: checkpoint does not match this search ({' '.join(str(err).split())[:200]})") from None

    def full_epoch(self) -> int:
        """Batches of one pass over the training split."""
        return math.ceil((self.train_data.size(0) - 2) / self.config.bptt)

    def batches_per_epoch(self) -> int:
        if self.config.method == "ess":
            return sum(self.round_steps)
        full = self.full_epoch()
        cap = self.config.max_batches_per_epoch
        return full if cap is None else min(full, cap)

    def run(self, on_batch: Callable[["Searcher"], None] | None = None) -> Genotype:
        """Search until `epochs` (ESS: `rounds`); returns the derived genotype (also written to the run directory)."""
        with self.stop:
            while self.epoch < self.config.total_epochs:
                self._train_epoch(on_batch)
                self._end_epoch()
        return self.final_genotype()

    def _train_epoch(self, on_batch) -> None:
        c, B = self.config, self.train_data.size(1)
        if self.pos == 0 and self.batch == 0:
            self.hidden, self.hidden_valid = self.model.init_hidden(B), self.model.init_hidden(B)
        self.model.train()
        total = self.batches_per_epoch()
        unit = "round" if c.method == "ess" else "epoch"
        with click.progressbar(length=total, label=f"search {unit} {self.epoch + 1}/{c.total_epochs}", file=sys.stderr,
                               item_show_func=lambda s: s) as bar:
            bar.update(self.batch)
            while self.batch < total:
                if self.pos >= self.train_data.size(0) - 2:
                    if c.method != "ess":
                        break
                    self.pos, self.hidden = 0, self.model.init_hidden(B)  # ESS rounds run on through the data
                start = time.perf_counter()
                seq_len = c.bptt if self.py_rng.random() < 0.95 else c.bptt // 2
                words, targets = get_batch(self.train_data, self.pos, seq_len)
                vpos = self.pos % (self.search_data.size(0) - 1)
                valid = get_batch(self.search_data, vpos, seq_len)
                self._step(words, targets, valid, seq_len)
                self.pos += seq_len
                self.batch += 1
                self.steps_done += 1
                self.totals["tokens"] += targets.numel() * self.ranks.world
                self.totals["seconds"] += time.perf_counter() - start
                bar.update(1, f"{self.totals['tokens'] / max(self.totals['seconds'], 1e-9):,.0f} tok/s")
                if on_batch is not None:
                    on_batch(self)
                if self.ranks.any(self.stop.requested):
                    self.run_dir.save_checkpoint(self.state())
                    raise Interrupted(f"stopped in epoch {self.epoch + 1} after batch {self.batch}; "
                                      f"continue with --resume {self.run_dir.path}")

    def _step(self, words: torch.Tensor, targets: torch.Tensor, valid, seq_len: int) -> None:
        c = self.config
        lr = c.lr * seq_len / c.bptt  # the DARTS code scales the lr by the sequence length
        self.hidden = detach_hidden(self.hidden)
        with autocast(self.device, c.precision):
            self.hidden_valid = detach_hidden(self.architects[self.phase()].step(
                (words, targets), self.hidden, valid, detach_hidden(self.hidden_valid), lr))
            logits, self.hidden, raw, dropped = self.model(words, self.hidden)
            loss, nll = regularised_loss(logits, targets, raw, dropped, c.ar, c.tar)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_value, nll_value = self.ranks.average((loss.detach(), nll.detach()))
        if not torch.isfinite(loss_value):
            raise InputError(f"loss became {loss_value.item()} in epoch {self.epoch + 1}, batch {self.batch + 1}; "
                             f"the last good checkpoint in {self.run_dir.path} is kept (try a lower --lr)")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=list(self.weights.values()))
        self.ranks.average_gradients(self.weights.values())
        torch.nn.utils.clip_grad_norm_(self.weights.values(), c.clip)
        self.optimizer.step()
        self.totals["nll"] += nll_value.item() * targets.numel() * self.ranks.world

    def _end_epoch(self) -> None:
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise InputError(f"weights became non-finite in epoch {self.epoch + 1}; "
                             f"the last good checkpoint in {self.run_dir.path} is kept")
        self.ranks.check_in_sync(self.model, f"at the end of epoch {self.epoch + 1}")
        valid_nll = evaluate(self.model, self.valid_data, self.config.bptt, self.config.eval_batches)
        self.epoch += 1
        record = self.epoch_record(valid_nll)
        self.batch = 0
        if self.config.method != "ess":
            self.pos = 0
        self.totals = {"nll": 0.0, "tokens": 0, "seconds": 0.0}
        self.run_dir.save_checkpoint(self.state())
        self.run_dir.log(record)
        click.echo(f"{'round' if self.config.method == 'ess' else 'epoch'} {record['epoch']}: train ppl {record['train_ppl']:.1f}  valid ppl "
                   f"{record['valid_ppl']:.1f}  {record['tokens_per_s']:,.0f} tok/s  "
                   f"genotype {record['genotype']}", err=True)

    def epoch_record(self, valid_nll: float) -> dict:
        """One log line: perplexities, α and their distance from uniform (intra `mad`, inter `mad_inter`)."""
        rnn, t = self.rnn, self.totals
        record = {"epoch": self.epoch, "step": self.steps_done, "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)),
                  "valid_ppl": ppl(valid_nll)}
        if isinstance(rnn, SearchRNN):
            record["alpha"] = rnn.alpha.detach().cpu().tolist()
            record["mad"] = mean_abs_deviation(rnn.mixing_weights().detach(), rnn.steps, rnn.method)
        if rnn.inter is not None and rnn.inter.searchable:
            record["alpha_inter"] = {k: getattr(rnn.inter, k).alpha.detach().cpu().tolist() for k in ("f", "g")}
            record["mad_inter"] = rnn.inter.mad()
        if isinstance(rnn.attention, SearchAttention):
            record["alpha_attention"] = rnn.attention.alpha.detach().cpu().tolist()
        geno = derived_genotype(rnn, self.config.top_n).to_dict()
        record.update({k: geno[k] for k in ("inter", "attention") if geno[k] is not None})
        record.update({"genotype": geno["nodes"], "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9),
                       "seconds": t["seconds"]})
        return record

    def final_genotype(self) -> Genotype:
        log = self.run_dir.read_log()
        c = self.config
        geno = derived_genotype(self.rnn, c.top_n)
        provenance = {
            "method": c.method, "order": c.order, "data": {k: str(v) for k, v in self.corpus.paths.items()},
            "seed": c.seed, "epochs": c.total_epochs, "command": c.command,
            "search_valid_ppl": log[-1]["valid_ppl"] if log else None,
            "settings": {k: v for k, v in asdict(c).items() if k not in ("command", "train", "valid", "test")},
            "toolkit_version": __version__, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(self.run_dir.path),
        }
        name = f"{c.method}_{c.search_space}_search_seed{c.seed}" if c.method == "ess" else f"{c.method}_search_seed{c.seed}"
        return Genotype(geno.nodes, geno.concat, geno.inter, geno.attention, name, provenance)
