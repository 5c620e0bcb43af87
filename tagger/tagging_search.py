"""Search a recurrent cell on the tagging task itself, as I-DARTS searched its NER cell (Jiang et al. 2019 §3.1).

The search model is `bin/train-tagger`'s BiRNN-CRF (the same embeddings, reprojection, dropouts
and CRF) with the search method's layer (`nas.methods`: the DARTS search cell, ESS's cell with its
inter-cell gates, or the weight-sharing cell of random search and ENAS) run in both directions as
its recurrent layer (`BiSearchRNN`). The loop is the bilevel one of `bin/search-lm`
(docs/concepts/search-methods.md), with the training sentences held apart for α (`--arch-split`)
as its validation split: at each batch the method's α group takes one Adam step
(`nas.methods.architect.Architect`, first or second order) on a batch of the held-apart sentences (random
search and ENAS draw the batch's cell instead), then the weights take one SGD step on a batch of
the other training sentences, as flair's trainer takes it (the CRF loss summed over the batch, the
gradient norm clipped). At each epoch end the method's own phase runs on the held-apart sentences
(ENAS trains its controller, random search scores its panel), and at the end random search and
ENAS score their candidates there, by the CRF loss per token. The dev split is only scored (F1 at
each epoch end, and of the chosen cell); the test split is never used.

The search is a training loop (`nas.runs.loop.TrainingLoop`) that holds the part both searches share
(`nas.runs.bilevel.BilevelSearch`) and steps with `nas.methods.architect.bilevel_step`: the run directory is
laid out as `bin/search-lm` lays it out (config.json, log.jsonl with one record per epoch: loss, dev F1, the
held-apart sentences' perplexity `valid_ppl`, α, the genotype so far, the search's health; checkpoint.pt,
written after the epoch's log line; at the end metrics.json and genotype.json), and Ctrl-C, `--resume`,
`--time-budget`, rollback after a non-finite loss (`--max-rollbacks`), the Hessian health check
(`--hessian-iterations`: the Hessian of the CRF loss per token of the first --batch-size held-apart sentences)
and DARTS-ES (`--early-stop hessian`) work as there. The checkpoint holds the RNG states and the position in
the epoch, so a resumed search on the CPU ends exactly where an uninterrupted one would; with pooled-flair
embeddings, whose word memory flair wipes whenever the model enters training mode, that memory starts afresh
at the resume.
"""

from __future__ import annotations

from typing import Iterator

import flair
import torch
import torch.nn as nn
from flair.training_utils import store_embeddings
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from nas.common.errors import InputError
from nas.common.runs import RunDir
from nas.common.stats import ppl
from nas.methods.architect import Batches, bilevel_step, is_arch, split_parameters
from nas.methods.base import Conclusion
from nas.runs.bilevel import BilevelSearch
from nas.methods.settings import SearchSettings
from nas.runs.loop import Diverged, TrainingLoop
from nas.methods import method_class
from nas.cells.recurrence import reverse_padded
from tagger.charlm_states import reuse_states
from tagger.corpora import Split, TaggingCorpus, corpus_of, to_sentences
from tagger.embeddings import build_embeddings
from tagger.evaluation import evaluate
from tagger.train import build_model

from .packed import padded
from .tagging_search_config import TaggingSearchConfig


class BiSearchRNN(nn.Module):
    """A search layer in both directions behind flair's `nn.LSTM` interface (as `tagger.model.PackedCellRNN`).

    One layer per direction, with weights of its own and every α shared (the backward layer's α
    are the forward layer's parameters), so the search derives one cell (and ESS one set of gates)
    for both directions, as `FrozenRNN` then runs it. The backward direction reads each sentence
    reversed within its length. Both run over the padded batch, so in training the search cell's
    BatchNorm statistics also see the padding steps of the shorter sentences (packing the batch
    would leave BatchNorm a single row at the longest sentence's last steps).
    """

    num_layers = 1
    bidirectional = True

    def __init__(self, forward: nn.Module, backward: nn.Module):
        super().__init__()
        self.hidden_size = forward.nhid
        for name, _ in list(backward.named_parameters()):
            if is_arch(name):  # one parameter: named once, stepped once
                owner, _, leaf = name.rpartition(".")
                setattr(backward.get_submodule(owner), leaf, forward.get_parameter(name))
        self.directions = nn.ModuleList([forward, backward])

    @classmethod
    def of(cls, method: type, config: SearchSettings) -> "BiSearchRNN":
        """The layer search method `method` builds from `config` (emsize: the input size), once per direction."""
        return cls(method.layer(config, None), method.layer(config, None))

    @property
    def cell(self) -> nn.Module:
        """The forward direction's layer, which holds α and derives the genotype."""
        return self.directions[0]

    def forward(self, packed: PackedSequence) -> tuple[PackedSequence, None]:
        x, lengths = padded(packed)  # (T, B, input)
        forward, backward = self.directions
        out_forward, _ = forward(x)
        out_backward, _ = backward(reverse_padded(x, lengths))
        out = torch.cat([out_forward, reverse_padded(out_backward, lengths)], -1)
        return pack_padded_sequence(out, lengths, enforce_sorted=False), None


def tagging_loss(
    model: nn.Module, params: dict[str, torch.Tensor], sentences: list, hidden=None
) -> tuple[torch.Tensor, None]:
    """flair's `SequenceTagger.forward_loss` with the model run on `params`: the Architect's loss_fn."""
    sentences = sorted(sentences, key=len, reverse=True)
    gold = model._prepare_label_tensor(sentences)
    tensor, lengths = model._prepare_tensors(sentences)
    loss, _ = model._calculate_loss(functional_call(model, params, (tensor, lengths)), gold)
    return loss, None


def split_for_alpha(train: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """(the sentences the weights train on, the `fraction` held apart for α), drawn with `seed`."""
    held = round(fraction * len(train.tokens))
    if min(held, len(train.tokens) - held) < 2:
        raise InputError(
            f"--arch-split {fraction}: leaves {held} of {len(train.tokens)} training sentences for α "
            f"and {len(train.tokens) - held} for the weights; each needs at least 2"
        )
    alpha, weights = train.sample_out(held, seed, "alpha")
    return weights, alpha


class HeldApart:
    """The held-apart training sentences as the search's validation split (`nas.methods.base.Scoring`):
    the mean CRF loss per token of the model as it stands, in eval mode, without gradients."""

    description = (
        "the held-apart training sentences (--arch-split) in --batch-size batches, "
        "CRF loss per token (valid_ppl: its exp)"
    )

    def __init__(self, model: nn.Module, sentences: list, batch_size: int):
        self.model = model
        self.batches = [[sentences[i] for i in batch] for batch in batches(list(range(len(sentences))), batch_size)]

    def full(self) -> float:
        return self.nll(None)

    def nll(self, batches: int | None) -> float:
        return self._loss(self.batches[:batches])

    def stream(self) -> Iterator[float]:
        while True:
            for batch in self.batches:
                yield self._loss([batch])

    def _loss(self, batches: list[list]) -> float:
        was_training = self.model.training
        self.model.eval()
        total, tokens = 0.0, 0
        with torch.no_grad():
            for batch in batches:
                loss, count = self.model.forward_loss(batch)
                total, tokens = total + float(loss), tokens + count
                store_embeddings(batch, "cpu")
        self.model.train(was_training)
        return total / max(tokens, 1)


def batches(order: list[int], size: int) -> list[list[int]]:
    """`order` cut into batches of `size`; a last batch of one sentence joins the one before
    (the search cell's BatchNorm needs two rows in training)."""
    cut = [order[i : i + size] for i in range(0, len(order), size)]
    if len(cut) > 1 and len(cut[-1]) == 1:
        cut[-2] += cut.pop()
    return cut


class TaggingSearch(TrainingLoop):
    """One search in one run directory; `run` trains until `config.epochs` and returns the genotype."""

    noun = "search"

    def __init__(self, config: TaggingSearchConfig, run_dir: RunDir, corpus: TaggingCorpus, embeddings):
        super().__init__(config, run_dir, config.time_budget, config.max_rollbacks)
        flair.device = self.device  # flair embeds on it, and sets it to the GPU wherever one exists: the config decides
        c = config
        self.corpus = corpus
        weight_split, alpha_split = split_for_alpha(corpus.train, c.arch_split, c.seed)
        self.train_sentences = to_sentences(weight_split, corpus.tag_type)
        self.alpha_sentences = to_sentences(alpha_split, corpus.tag_type)
        self.dev_sentences = to_sentences(corpus.dev, corpus.tag_type)
        method, settings = method_class(c.method), c.search_settings(embeddings.embedding_length)
        self.layer = BiSearchRNN.of(method, settings)
        self.model = build_model(c.tagger(), corpus, embeddings, None, rnn=self.layer)
        self.model.embeddings.requires_grad_(False)  # features, as in train-tagger: neither weights nor α
        reuse_states(embeddings, self.train_sentences + self.alpha_sentences + self.dev_sentences)
        self.weights = list(split_parameters(self.model)[0].values())
        self.optimizer = torch.optim.SGD(self.weights, lr=c.lr)
        one_pass = len(batches(list(range(len(self.train_sentences))), c.batch_size))
        self.method = method(
            settings, self.model, min(one_pass, c.max_batches_per_epoch or one_pass), loss_fn=tagging_loss
        )
        self.validation = HeldApart(self.model, self.alpha_sentences, c.batch_size)
        self.bilevel = BilevelSearch(self)
        self.steps_done = 0
        self.order: list[int] = []
        self.alpha_order: list[int] = []
        self.train_batches: list[list[int]] = []
        self.alpha_batches: list[list[int]] = []

    @classmethod
    def open(cls, config: TaggingSearchConfig, run_dir: RunDir, resume: bool) -> "TaggingSearch":
        """The search of `config` in `run_dir`, started fresh or resumed from its checkpoint."""
        c = config
        corpus = corpus_of(c)
        search = cls(config, run_dir, corpus, build_embeddings(c.embeddings, c.pooling))
        if resume:
            search.resume()
        else:
            search.start()
        return search

    @property
    def cell(self) -> nn.Module:
        """The forward direction's layer, which holds α and derives the genotype."""
        return self.layer.cell

    # -- state -------------------------------------------------------------------------------

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "method": self.method.state(),
            "epoch": self.epoch,
            "steps": self.steps_done,
            "order": self.order,
            "alpha_order": self.alpha_order,
            **self.bilevel.state(),
            **self.position(),
        }

    def restore_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state(
            state["method"] if "method" in state else {"all": state["architect"]}
        )  # older: DARTS's one group
        self.epoch, self.steps_done = state["epoch"], state["steps"]
        self.order, self.alpha_order = state["order"], state["alpha_order"]
        self.bilevel.load_state(state)
        self.load_position(state)

    # -- steps -------------------------------------------------------------------------------

    def fresh_totals(self) -> dict:
        return {"loss": 0.0, "loss_tokens": 0, "tokens": 0, "seconds": 0.0}

    def begin_epoch(self) -> None:
        """A fresh epoch draws new orders of both parts of the training split; a resumed one keeps its own."""
        c = self.config
        if self.batch == 0:
            self.order = self.py_rng.sample(range(len(self.train_sentences)), len(self.train_sentences))
            self.alpha_order = self.py_rng.sample(range(len(self.alpha_sentences)), len(self.alpha_sentences))
        self.train_batches = batches(self.order, c.batch_size)[: c.max_batches_per_epoch]
        self.alpha_batches = batches(self.alpha_order, c.batch_size)

    def batches_per_epoch(self) -> int:
        """A pass over the weights' sentences (an ESS round: its intra and inter steps)."""
        return self.method.batches_per_epoch(len(self.train_batches))

    def train_batch(self) -> int:
        """α's step (or the method's draw) on a batch of the held-apart sentences, then the weights' step
        on a batch of the others; an ESS round longer than a pass starts the pass again."""
        train = [self.train_sentences[i] for i in self.train_batches[self.batch % len(self.train_batches)]]
        alpha = [self.alpha_sentences[i] for i in self.alpha_batches[self.batch % len(self.alpha_batches)]]
        bilevel_step(self.method, Batches(self.batch, train, alpha, self.config.lr), self.take_weight_step)
        store_embeddings(train + alpha, "cpu")  # as flair's trainer: static embeddings kept, dynamic ones dropped
        self.steps_done += 1
        return sum(map(len, train))

    def take_weight_step(self, train: list) -> None:
        """One SGD step on the summed CRF loss, as flair's trainer; a non-finite loss or gradient raises
        `Diverged` before the weights change."""
        loss, count = self.model.forward_loss(train)
        where = f"in epoch {self.epoch + 1}, batch {self.batch + 1}"
        if not torch.isfinite(loss):
            raise Diverged(f"loss became {loss.item()} {where}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=self.weights)
        norm = torch.nn.utils.clip_grad_norm_(self.weights, self.config.clip)
        if not torch.isfinite(norm):
            raise Diverged(f"gradient norm became {norm.item()} {where}")
        self.optimizer.step()
        self.totals["loss"] += loss.item()
        self.totals["loss_tokens"] += count

    def giving_up(self, problem: str) -> str:
        return f"{problem}; {self.kept_note()} (try a lower --lr)"

    # -- epochs: the bilevel search's, with the tagger's scores ------------------------------------------

    def validate(self) -> tuple[float, float]:
        return self.bilevel.validate()

    def epoch_record(self, valid: tuple[float, float], seconds: float) -> dict:
        return self.bilevel.epoch_record(valid, seconds)

    def stopped_early(self) -> bool:
        return self.bilevel.stopped_early()

    def validation_score(self) -> tuple[float, float]:
        """(the dev F1, the held-apart sentences' CRF loss per token) of the search model as it stands."""
        return self.dev_f1(), self.validation.full()

    def dev_f1(self) -> float:
        """The dev F1 of the search model as it stands."""
        return evaluate(self.model, self.dev_sentences, self.corpus.dev.tags, self.config.eval_batch_size)[0]["f1"]

    def scores(self, valid: tuple[float, float]) -> dict:
        """The train loss, the dev F1 and, as the LM search's `valid_ppl`, the held-apart perplexity
        (the split α learns on; the convergence rule reads it)."""
        dev_f1, held_nll = valid
        return {
            "train_loss": self.totals["loss"] / max(self.totals["loss_tokens"], 1),
            "dev_f1": dev_f1,
            "valid_ppl": ppl(held_nll),
        }

    def counts(self, seconds: float) -> dict:
        t = self.totals
        return {"tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9), "seconds": seconds}

    def health_loss(self, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """The CRF loss per token of the first --batch-size held-apart sentences (the held-apart split's
        first batch, in its fixed order), under `weights` (detached) and the model's α."""
        sentences = self.validation.batches[0]
        loss, _ = tagging_loss(self.model, {**weights, **self.bilevel.arch}, sentences)
        store_embeddings(sentences, "cpu")
        return loss / sum(map(len, sentences))

    # -- the result --------------------------------------------------------------------------

    def finish(self):
        """The genotype; genotype.json and metrics.json written (`BilevelSearch.finish`)."""
        return self.bilevel.finish()

    def search_score(self, conclusion: Conclusion, last: dict | None) -> dict:
        """The chosen cell's dev F1: scored anew where the method chose among candidates, else the log's."""
        return {
            "search_dev_f1": self.dev_f1() if conclusion.valid_ppl is not None else last["dev_f1"] if last else None
        }

    def provenance_data(self, log: list[dict]) -> dict:
        return {
            "task": "tagging",
            "corpus": self.config.corpus,
            "data": {name: str(split.path) for name, split in (("train", self.corpus.train), ("dev", self.corpus.dev))},
            "arch_split": self.config.arch_split,
        }

    def genotype_name(self) -> str:
        return self.method.genotype_name().replace("_search_seed", "_tagger_search_seed")
