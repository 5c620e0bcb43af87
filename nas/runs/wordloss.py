"""Per-word validation loss of two language models and its difference (ESS Table 3).

For each word type w of the evaluated split: Δ(w) = mean NLL of model B on w − that of model A,
over w's occurrences as a prediction target (negative: B predicts w better). ESS lists the words
with the largest |Δ| (mostly rare words when B has inter-cell connections) beside the most
frequent words (whose Δ is small).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from nas.common.errors import InputError
from nas.common.files import safe_torch_load
from nas.common.runs import RunDir
from nas.lm.corpus import batchify, encode, read_tokens, vocabulary
from nas.lm.evaluation import token_losses
from nas.lm.model import RNNModel
from nas.lm.model_file import FORMAT as LM_FORMAT
from nas.runs.search_model import build_search_model
from nas import speed
from nas.runs.config import SearchConfig
from nas.runs.train import load_for_evaluation


@dataclass
class LanguageModel:
    model: RNNModel
    vocab: list[str]
    bptt: int
    train_path: Path | None  # where the vocabulary came from, when known
    source: str


def load_language_model(path: str | Path, device: str = "cpu") -> LanguageModel:
    """A trained language model from disk, whatever wrote it.

    Reads a `bin/train-lm` run directory (the retrained model of best.pt, or of checkpoint.pt
    before an epoch has finished) or one of its model files, and a `bin/search-lm` run directory
    (config.json + checkpoint.pt; the model is the search model as it stands at its last
    checkpoint). This is the one place to add the model files of other commands.
    """
    path = Path(path)
    if path.is_file():
        return _retrained(path, device)
    if (path / "best.pt").is_file():
        return _retrained(path / "best.pt", device)
    checkpoint = path / "checkpoint.pt"
    if not checkpoint.is_file():
        raise InputError(
            f"{path}: not a language model (expected a bin/train-lm run directory with best.pt or "
            "checkpoint.pt, a bin/train-lm model file, or a bin/search-lm run directory with "
            "config.json and checkpoint.pt)"
        )
    state = safe_torch_load(checkpoint, device)
    if isinstance(state, dict) and state.get("format") == LM_FORMAT:
        return _retrained(checkpoint, device)
    run = RunDir(path)
    config = SearchConfig.from_dict(run.config(), run.path / "config.json")
    train = Path(config.train)
    if not train.is_file():
        raise InputError(f"{path}: its training file {train} (the vocabulary) is missing")
    vocab = vocabulary(read_tokens(train))
    model = build_search_model(config, len(vocab), speed.for_prediction(device))
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as err:
        raise InputError(
            f"{run.checkpoint}: checkpoint does not match its config.json ({' '.join(str(err).split())[:200]})"
        ) from None
    return LanguageModel(model.to(device).eval(), vocab, config.bptt, train, str(path))


def _retrained(path: Path, device: str) -> LanguageModel:
    """A `bin/train-lm` model file: it holds its vocabulary; the training file, if still there, gives word counts."""
    model, data = load_for_evaluation(path, device)
    config = data.get("config") or {}
    train = Path(config["train"]) if config.get("train") else None
    return LanguageModel(
        model, data["vocab"], config.get("bptt", 35), train if train and train.is_file() else None, str(path)
    )


@dataclass
class WordRow:
    word: str
    count: int
    train_count: int | None
    loss_a: float
    loss_b: float

    @property
    def delta(self) -> float:
        return self.loss_b - self.loss_a


# progress(label, steps, columns) -> on_chunk(steps done): how a caller shows an evaluation's progress
Progress = Callable[[str, int, int], Callable[[int], None]]


def per_word_loss(
    lm: LanguageModel, ids: torch.Tensor, batch_size: int, where: str, label: str = "", progress: Progress | None = None
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(loss sum per word id, occurrences per word id, mean NLL) over `ids` as the targets of `lm`."""
    device = next(lm.model.parameters()).device
    data = batchify(ids, batch_size, lm.bptt, where, "--batch-size").to(device)
    on_chunk = progress(label, data.size(0) - 1, data.size(1)) if progress is not None else None
    targets, losses = token_losses(lm.model, data, lm.bptt, on_chunk=on_chunk)
    V = len(lm.vocab)
    sums = torch.zeros(V, dtype=torch.float64).index_add_(0, targets.cpu(), losses.cpu().double())
    counts = torch.bincount(targets.cpu(), minlength=V)
    return sums, counts, float(losses.double().mean())


def compare_words(
    a: LanguageModel, b: LanguageModel, split: Path, batch_size: int = 10, progress: Progress | None = None
) -> tuple[list[WordRow], float, float]:
    """Rows for every word type predicted in `split`, and the mean NLL of each model."""
    if a.vocab != b.vocab:
        raise InputError(
            f"{a.source} and {b.source} have different vocabularies (trained on different corpora); "
            "per-word losses are comparable only on the same vocabulary"
        )
    ids = encode(read_tokens(split), a.vocab)
    sums_a, counts, mean_a = per_word_loss(a, ids, batch_size, str(split), f"model A on {split}", progress)
    sums_b, _, mean_b = per_word_loss(b, ids, batch_size, str(split), f"model B on {split}", progress)
    train_counts = Counter(read_tokens(a.train_path)) if a.train_path is not None else None
    rows = []
    for w in torch.nonzero(counts).view(-1).tolist():
        n = int(counts[w])
        word = a.vocab[w]
        rows.append(
            WordRow(
                word,
                n,
                None if train_counts is None else train_counts[word],
                float(sums_a[w]) / n,
                float(sums_b[w]) / n,
            )
        )
    return rows, mean_a, mean_b


def largest_differences(rows: list[WordRow], top: int, min_count: int = 1) -> list[WordRow]:
    return sorted((r for r in rows if r.count >= min_count), key=lambda r: (-abs(r.delta), r.word))[:top]


def most_frequent(rows: list[WordRow], top: int) -> list[WordRow]:
    return sorted(rows, key=lambda r: (-r.count, r.word))[:top]
