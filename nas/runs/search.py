"""The LM search (docs/concepts/search-methods.md; DARTS's rnn/train_search.py): α on validation batches, weights on
train batches.

`Searcher` is a language model's training loop (`nas.runs.loop.LMLoop`) that runs a search method
(`nas.methods`) and holds the part both searches share (`nas.runs.bilevel.BilevelSearch`): each batch,
`nas.methods.architect.bilevel_step`: the method's α group of that batch takes one step on a validation batch
of the same length (random search and ENAS draw the batch's cell instead), then the weights take one SGD step
on the train batch. The log records the train and validation perplexities; the health's Hessian is that of the
validation NLL on one fixed validation batch (the first --bptt rows of the α step's columns). At the end the
genotype and the search's metrics (`search_valid_ppl`) are written to the run directory.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Iterator

import torch
from torch.func import functional_call

from nas.cells.cell import FrozenRNN
from nas.cells.search_cell import SearchRNN
from nas.common.errors import InputError
from nas.common.runs import RunDir, autocast
from nas.fast import backends, graphs
from nas.fast.graphs import StepGraphs
from nas.lm.corpus import Corpus, batchify
from nas.common.stats import ppl
from nas.lm.evaluation import get_batch
from nas.lm.evaluation import evaluate
from nas.lm.model import RNNModel, detach_hidden, language_model_loss, lm_loss
from nas.runs.search_model import build_search_model
from nas.methods import method_class, search_settings, total_epochs
from nas.methods.architect import Batch, Batches, bilevel_step, split_parameters
from nas.methods.base import Conclusion
from nas.runs.bilevel import BilevelSearch
from nas.runs.config import SearchConfig
from nas.common.distributed import current, sync_batch_norm
from nas.runs.loop import LMLoop


@dataclass
class Validation:
    """The validation split as a search scores on it: eval mode, fp32, no gradients, the model's current weights.

    `columns` is the split in --batch-size columns (this rank's share under torchrun), as the α step
    reads it; `split` the split in --eval-batch-size columns, as the epoch's validation reads it.
    Every number is the mean over all ranks' columns, so every rank gets the same one.
    """

    description = "the validation split in --batch-size columns, from a fresh hidden state, NLL per word"
    model: RNNModel
    columns: torch.Tensor
    split: torch.Tensor
    bptt: int
    max_batches: int | None  # --eval-batches
    graphs: StepGraphs | None = None  # `full` replays its chunks as CUDA graphs (`nas.fast.graphs`)

    def full(self) -> float:
        """The epoch's validation NLL (`split`, at most --eval-batches batches)."""
        return evaluate(self.model, self.split, self.bptt, self.max_batches, graphs=self.graphs)

    def nll(self, batches: int | None) -> float:
        """Mean NLL over the first `batches` batches of `columns` (None: all), from a fresh hidden state."""
        return self._mean(evaluate(self.model, self.columns, self.bptt, batches))

    def stream(self) -> Iterator[float]:
        """The mean NLL of each next batch of `columns`, the hidden state carried on, fresh at each pass's start;
        endless.
        """
        while True:
            hidden = self.model.init_hidden(self.columns.size(1))
            for i in range(0, self.columns.size(0) - 1, self.bptt):
                words, targets = get_batch(self.columns, i, self.bptt)
                was_training = self.model.training
                self.model.eval()
                with torch.no_grad():
                    logits, hidden, _, _ = self.model(words, hidden)
                    nll = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
                self.model.train(was_training)
                yield self._mean(float(nll))

    def _mean(self, value: float) -> float:
        device = self.columns.device  # NCCL reduces tensors on the GPU
        return float(current().average([torch.tensor([value], dtype=torch.float64, device=device)])[0])


class Searcher(LMLoop):
    """One LM search in one run directory; `run` trains until its epochs and returns the genotype."""

    noun = "search"

    def __init__(self, config: SearchConfig, run_dir: RunDir, corpus: Corpus):
        super().__init__(config, run_dir, corpus, config.time_budget, config.max_rollbacks)
        c, valid = config, corpus.paths["valid"]
        self.search_data = self.ranks.columns(batchify(corpus.valid, c.batch_size, c.bptt, valid)).to(self.device)
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, valid, "--eval-batch-size").to(self.device)
        self.model = sync_batch_norm(build_search_model(c, len(corpus.vocab))).to(self.device)
        self.weights = list(split_parameters(self.model)[0].values())
        self.optimizer = torch.optim.SGD(self.weights, lr=c.lr, weight_decay=c.wdecay)
        self.method = method_class(c.method)(
            search_settings(c), self.model, self.full_epoch(), loss_fn=language_model_loss
        )
        self.graphs = StepGraphs() if self.records_steps() else None
        self.validation = Validation(
            self.model,
            self.search_data,
            self.valid_data,
            c.bptt,
            c.eval_batches,
            StepGraphs() if self.graphs is not None else None,
        )
        self.steps_done = 0
        self.hidden_valid = None
        # the splits are the provenance's data, not its settings
        self.bilevel = BilevelSearch(self, settings_not_kept=("command", "train", "valid", "test"))
        self.capturable_optimizers()

    @property
    def rnn(self) -> SearchRNN | FrozenRNN:
        return self.model.rnn

    @property
    def cell(self) -> SearchRNN | FrozenRNN:
        """The model's RNN: it holds α (ESS's inter-only search: the gates around a fixed cell)."""
        return self.rnn

    @property
    def epochs(self) -> int:
        return total_epochs(self.config)

    @property
    def wraps(self) -> bool:
        return self.method.wraps

    def batches_per_epoch(self) -> int:
        return self.method.batches_per_epoch(super().batches_per_epoch())

    def reset_hidden(self) -> None:
        super().reset_hidden()
        self.hidden_valid = self.model.init_hidden(self.train_data.size(1))

    def epoch_lr(self) -> float:
        """--lr, decayed from --lr-decay-start on (ENAS's schedule; DARTS's search keeps it constant)."""
        return self.config.epoch_lr(self.epoch + 1)

    def sample_seq_len(self) -> int:
        """bptt, or bptt / 2 for 5% of the batches (the DARTS search code)."""
        bptt = self.config.bptt
        return bptt if self.py_rng.random() < 0.95 else bptt // 2

    def records_steps(self) -> bool:
        """Whether bilevel steps run as recorded CUDA graphs: the backend's choice, for methods whose α
        step is the same GPU work at every batch (first order; not the sampled cells of random search and ENAS)."""
        return (
            backends.current(self.device).captures_steps
            and graphs.usable(self.device, self.ranks.parallel)
            and self.config.order == 1
            and self.method.records_steps
        )

    def capturable_optimizers(self) -> None:
        if self.graphs is not None:
            for architect in self.method.architects.values():
                graphs.make_capturable(architect.optimizer)

    # -- state -------------------------------------------------------------------------------

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "architects": self.method.state(),
            "epoch": self.epoch,
            "steps": self.steps_done,
            **self.position(),
            "hidden_valid": self.ranks.gather_columns(self.hidden_valid),
            **self.bilevel.state(),
            "elapsed": self.elapsed,
            "rollbacks": self.rollbacks,
            "lr_schedule": [self.config.lr_decay, self.config.lr_decay_start],
        }

    def restore_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state(state["architects"])
        self.capturable_optimizers()
        if self.graphs is not None:
            self.graphs.clear()  # the α optimisers' states are new tensors
        self.epoch, self.steps_done = state["epoch"], state["steps"]
        self.load_position(state)
        self._check_lr_schedule(state)
        self.hidden_valid = self.ranks.columns(state["hidden_valid"])
        self.bilevel.load_state(state)
        # --time-budget and --max-rollbacks count over resumes (checkpoints written before they did: from 0)
        self.elapsed, self.rollbacks = state.get("elapsed", 0.0), state.get("rollbacks", 0)

    def _check_lr_schedule(self, state: dict) -> None:
        """A resume may change the lr schedule (--lr-decay, --lr-decay-start) only for epochs not yet begun,
        so that the run stays the one a fresh start with its config would make."""
        decay, start = state.get("lr_schedule", (1.0, 1))  # checkpoints written before the schedule: constant lr
        ran = replace(self.config, lr_decay=decay, lr_decay_start=start)
        begun = self.epoch + (1 if self.batch else 0)
        changed = [e for e in range(1, begun + 1) if ran.epoch_lr(e) != self.config.epoch_lr(e)]
        if changed:
            raise InputError(
                f"--lr-decay {self.config.lr_decay} --lr-decay-start {self.config.lr_decay_start}: would change "
                f"the lr of epoch {changed[0]}, which {self.run_dir.path} has already run (it had --lr-decay "
                f"{decay} --lr-decay-start {start}); a resume may change it from epoch {begun + 1} on"
            )

    # -- steps -------------------------------------------------------------------------------

    def step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        valid = get_batch(self.search_data, self.pos % (self.search_data.size(0) - 1), seq_len)
        self.bilevel_step(words, targets, valid, seq_len)

    def bilevel_step(self, words: torch.Tensor, targets: torch.Tensor, valid: Batch, seq_len: int) -> None:
        """The α step of this batch's group on `valid`, then the weight step on (words, targets).

        With `graphs` (a CUDA device) both run as one recorded step (`nas.fast.graphs`), replayed per
        sequence length, learning rate and α group; its loss and gradient norm are checked after it."""
        lr = self.epoch_lr() * seq_len / self.config.bptt  # the DARTS code scales the lr by the sequence length
        if self.graphs is None:
            self.hidden = detach_hidden(self.hidden)
            batches = self.batches(words, targets, valid, lr, self.hidden, self.hidden_valid)
            hidden_valid, _ = bilevel_step(
                self.method, batches, lambda train: self.take_weight_step(train, seq_len), self.alpha_precision
            )
            self.hidden_valid = detach_hidden(hidden_valid)
        else:
            self.set_lr(seq_len)
            key = (lr, self.method.phase(self.batch))
            loss, nll, norm, self.hidden, self.hidden_valid = self.graphs(
                key, functools.partial(self.device_step, lr), words, targets, valid, self.hidden, self.hidden_valid
            )
            self.check_finite(loss, "loss")
            self.check_finite(norm, "gradient norm")
            self.count_nll(nll, targets)
        self.steps_done += 1

    def take_weight_step(self, train: Batch, seq_len: int) -> None:
        """The weights' SGD step on `train` (`LMLoop.weight_step`), at the lr of `seq_len`."""
        self.weight_step(*train, seq_len)

    def batches(self, words: torch.Tensor, targets: torch.Tensor, valid: Batch, lr: float, hidden, hidden_valid):
        """The bilevel step's data: the train batch with its hidden state, the validation batch with its own."""
        return Batches(self.batch, (words, targets), valid, lr, hidden, detach_hidden(hidden_valid))

    def alpha_precision(self):
        """The α step's precision: --precision's, as the weight step's (`nas.common.runs.autocast`)."""
        return autocast(self.device, self.config.precision)

    def device_step(
        self, lr: float, words: torch.Tensor, targets: torch.Tensor, valid: Batch, hidden, hidden_valid
    ) -> tuple:
        """The bilevel step as GPU work alone, for recording: (loss, NLL, gradient norm, hidden, hidden_valid)."""
        batches = self.batches(words, targets, valid, lr, detach_hidden(hidden), hidden_valid)
        hidden_valid, (loss, nll, norm, hidden) = bilevel_step(
            self.method, batches, lambda train: self.weight_update(*train, hidden), self.alpha_precision
        )
        return loss, nll, norm, hidden, detach_hidden(hidden_valid)

    def giving_up(self, problem: str) -> str:
        return f"{problem}; {self.kept_note()} (try a lower --lr)"

    # -- epochs: the bilevel search's, with the LM's scores --------------------------------------------

    def validate(self) -> float:
        return self.bilevel.validate()

    def epoch_record(self, valid: float, seconds: float) -> dict:
        return self.bilevel.epoch_record(valid, seconds)

    def stopped_early(self) -> bool:
        return self.bilevel.stopped_early()

    def validation_score(self) -> float:
        """The validation NLL."""
        return self.validation.full()

    def scores(self, valid_nll: float) -> dict:
        t = self.totals
        return {
            "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)),
            "valid_ppl": ppl(valid_nll),
            "lr": self.config.epoch_lr(self.epoch),
        }

    def counts(self, seconds: float) -> dict:
        t = self.totals
        return {"tokens": t["tokens"], "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9), "seconds": t["seconds"]}

    def health_loss(self, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """The validation NLL the Hessian is taken of, under `weights` (detached) and the model's α: the
        first --bptt rows of the α step's validation columns, from a fresh hidden state."""
        words, targets = get_batch(self.search_data, 0, self.config.bptt)
        logits, _, _, _ = functional_call(
            self.model, {**weights, **self.bilevel.arch}, (words, self.model.init_hidden(words.size(1)))
        )
        return lm_loss(logits, targets)

    # -- the result --------------------------------------------------------------------------

    def finish(self):
        """The genotype; genotype.json and metrics.json written (`BilevelSearch.finish`)."""
        return self.bilevel.finish()

    def genotype_name(self) -> str:
        return self.method.genotype_name()

    def search_score(self, conclusion: Conclusion, last: dict | None) -> dict:
        """The chosen cell's validation perplexity: the method's own (candidates scored anew), else the log's."""
        valid_ppl = conclusion.valid_ppl if conclusion.valid_ppl is not None else last["valid_ppl"] if last else None
        if valid_ppl is not None and not math.isfinite(valid_ppl):
            valid_ppl = None  # the model diverged on validation; null keeps genotype.json strict JSON
        return {"search_valid_ppl": valid_ppl}

    def provenance_data(self, log: list[dict]) -> dict:
        return {
            "data": {k: str(v) for k, v in self.corpus.paths.items()},
            "tokens": sum(r.get("tokens", 0) for r in log),
        }
