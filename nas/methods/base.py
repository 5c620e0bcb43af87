"""What a search method is: the plug-in interface the searches run (`nas.runs.search.Searcher`, and the tagger's;
DARTS's architect.py and the method parts of its model_search.py).

A method owns the search layer it trains, its α groups (one `Architect` each, an Adam optimiser
over some of the α), the schedule that picks which group steps at each batch, what the epoch's log
line records of its state, and the genotype it derives from the layer. The defaults here are
DARTS's: one group of all α stepping on every batch, an epoch one pass over the training split,
the cell derived by the layer's own rule. Methods that score architectures themselves (random
search, ENAS) do it on the `Scoring` the search hands them (the LM search's `Validation`, or the tagging search's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol

import torch.nn as nn

from nas.cells.attention import SearchAttention
from nas.cells.genotype import Genotype
from nas.cells.search_cell import SearchRNN
from nas.common.distributed import current
from nas.methods.architect import Architect, Batch, LossFn
from nas.methods.settings import SearchSettings


class Scoring(Protocol):
    """What a method may score architectures on: the search's held-out data (the LM's validation
    split, `Validation`; the tagging search's held-apart sentences), as mean NLLs."""

    description: str  # what is scored and how, for metrics.json (e.g. the data, the loss)

    def full(self) -> float:
        """The epoch's validation NLL."""

    def nll(self, batches: int | None) -> float:
        """Mean NLL over the first `batches` batches (None: all), from a fresh state."""

    def stream(self) -> Iterator[float]:
        """The mean NLL of each next batch; endless."""


@dataclass
class Conclusion:
    """How a search ends: the genotype, and what the method measured choosing it."""

    genotype: Genotype
    valid_ppl: float | None = None  # the chosen cell's validation perplexity (None: the last epoch's stands)
    metrics: dict = field(default_factory=dict)  # what metrics.json records of the choice


class SearchMethod:
    wraps = False  # True: an epoch runs on through the end of the training data (ESS rounds)
    records_steps = True  # the same GPU work at every batch, so a CUDA graph may replay it (`nas.fast.graphs`)

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, loss_fn: LossFn):
        """`full_epoch`: batches of one pass over the training split; `loss_fn`: the loss α steps on
        (the language model's, or the task's on another task)."""
        self.config, self.full_epoch, self.loss_fn = config, full_epoch, loss_fn
        self.settings = config.method_settings  # its own (`nas.methods.settings`), as its registry entry declares
        self.architects = self.make_architects(model)

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        """The search layer (emsize → nhid = emsize), with the NASABN `attention` after it when given."""
        raise NotImplementedError

    def make_architects(self, model: nn.Module) -> dict[str, Architect]:
        """The α groups by phase name."""
        c = self.config
        return {
            "all": Architect(
                model,
                c.arch_lr,
                c.arch_wdecay,
                c.order,
                c.wdecay,
                weight_clip=c.clip,
                loss_fn=self.loss_fn,
                average=current().average,
            )
        }

    def batches_per_epoch(self, one_pass: int) -> int:
        """Batches of an epoch, given those of one (capped) pass over the training split."""
        return one_pass

    def phase(self, batch: int) -> str:
        """The α group that steps at batch `batch` of the epoch."""
        return next(iter(self.architects))

    def step_alpha(self, batch: int, train: Batch, train_hidden, valid: Batch, valid_hidden, eta: float):
        """The α step of batch `batch`; returns the validation hidden state to carry on."""
        return self.architects[self.phase(batch)].step(train, train_hidden, valid, valid_hidden, eta)

    def before_weight_step(self) -> None:
        """What the method changes for the weight step that follows its α step, undone by its next `step_alpha`
        and by `after_batches` (SDARTS-RS draws its perturbation of the mixing weights here); DARTS: nothing."""

    def after_batches(self, validation: Scoring) -> None:
        """The method's own phase after an epoch's batches, before its validation (ENAS trains its controller here)."""

    def record(self, rnn: nn.Module) -> dict:
        """What the epoch's log line records of the method's state: every α and their distance from uniform
        (intra `mad`, inter `mad_inter`)."""
        record = {}
        if isinstance(rnn, SearchRNN):
            record["alpha"] = rnn.alpha.detach().cpu().tolist()
            record["mad"] = rnn.rule.mad(rnn.mixing_weights().detach(), rnn.steps)
        if rnn.inter is not None and rnn.inter.searchable:
            record["alpha_inter"] = {k: getattr(rnn.inter, k).alpha.detach().cpu().tolist() for k in ("f", "g")}
            record["mad_inter"] = rnn.inter.mad()
        if isinstance(rnn.attention, SearchAttention):
            record["alpha_attention"] = rnn.attention.alpha.detach().cpu().tolist()
        return record

    def state(self) -> dict:
        return {phase: a.optimizer.state_dict() for phase, a in self.architects.items()}

    def load_state(self, state: dict) -> None:
        for phase, architect in self.architects.items():
            architect.optimizer.load_state_dict(state[phase])

    def cell(self, rnn: nn.Module) -> Genotype:
        """The intra cell the layer stands for now."""
        return rnn.genotype(self.config.top_n)

    def derive(self, rnn: nn.Module) -> Genotype:
        """The cell, ESS gates and attention type the search layer stands for now."""
        cell = self.cell(rnn)
        inter = None if rnn.inter is None else rnn.inter.derive()
        attention = None if rnn.attention is None else rnn.attention.derive()
        return Genotype(cell.nodes, cell.concat, inter, attention)

    def conclude(self, rnn: nn.Module, validation: Scoring) -> Conclusion:
        """The search's result once the last epoch is done: here the cell the layer stands for now."""
        return Conclusion(self.derive(rnn))

    def genotype_name(self) -> str:
        c = self.config
        return f"{c.method}_search_seed{c.seed}"
