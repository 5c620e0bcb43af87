"""A retrained language model as a self-contained file: what `bin/train-lm` writes and `bin/eval-lm` reads.

The file holds tensors and plain containers only (it loads with weights_only=True): the model's
shape (`spec`, with the genotype as a JSON dict), the vocabulary, the state dict and whatever the
writer adds (the training config, the epoch, the training state of a resumable checkpoint).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn as nn

from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype, validate
from nas.common.errors import InputError
from nas.common.files import pickle_head, safe_torch_load
from nas.common.parameters import count_on_meta
from nas.lm.lstm import LSTMLayer
from nas.lm.model import RNNModel
from nas.speed import Backend, attach, choose

FORMAT = "nas-lm-model"
# a tagger's model file (tagger.model_file's keys) or its training checkpoint (tagger.resume), read as bytes
TAGGER_MARKERS = (b"nas_tagger_format", b"nas-tagger-model", b"nas-tagger-checkpoint")
VERSION = 1
KINDS = ("cell", "lstm")


@dataclass
class LMSpec:
    """Everything needed to rebuild the network (dropouts included: they are part of the model)."""

    kind: str
    ntoken: int
    emsize: int
    nhid: int
    genotype: dict | None = None
    dropout: float = 0.75
    dropouth: float = 0.25
    dropoutx: float = 0.75
    dropouti: float = 0.2
    dropoute: float = 0.1


def build_rnn(
    kind: str, genotype: Genotype | None, ninp: int, nhid: int, dropout_x: float = 0.0, dropout_h: float = 0.0
) -> nn.Module:
    """The recurrent layer: the genotype's `FrozenRNN` (one direction) or the LSTM baseline."""
    if kind == "lstm":
        return LSTMLayer(ninp, nhid, dropout_x, dropout_h)
    try:
        return FrozenRNN(genotype, ninp, nhid, directions=1, dropout_x=dropout_x, dropout_h=dropout_h)
    except ValueError as err:
        raise InputError(f"cell {genotype.name or ''}: {err}") from None


def build_lm(spec: LMSpec, backend: Backend | None = None) -> RNNModel:
    """The language model of `spec` on `backend`, the run's (`nas.speed.of`); without one, `auto`'s for a CPU
    (as `load_lm` loads a model for scoring)."""
    genotype = validate(spec.genotype, "genotype") if spec.kind == "cell" else None
    rnn = build_rnn(spec.kind, genotype, spec.emsize, spec.nhid, spec.dropoutx, spec.dropouth)
    model = RNNModel(spec.ntoken, spec.emsize, rnn, spec.dropout, spec.dropouti, spec.dropoute)
    return attach(model, choose("auto", "cpu") if backend is None else backend)


def rnn_parameters(kind: str, genotype: Genotype | None, ninp: int, nhid: int) -> int:
    """Parameters of the recurrent layer alone, counted on the meta device (nothing allocated)."""
    return count_on_meta(lambda: build_rnn(kind, genotype, ninp, nhid))


def model_file(spec: LMSpec, vocab: list[str], state_dict: dict, **extra: Any) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "spec": asdict(spec),
        "vocab": list(vocab),
        "state_dict": state_dict,
        **extra,
    }


def load_model_file(
    path: str | os.PathLike, device: str | torch.device = "cpu", backend: Backend | None = None
) -> tuple[RNNModel, dict]:
    """(model with the file's weights, in eval mode, the whole file), on `backend` (`build_lm`'s default without
    one); a foreign file is an InputError."""
    if any(marker in pickle_head(path) for marker in TAGGER_MARKERS):  # the loader would say "not tensors"
        raise InputError(
            f"{path}: a tagger's file (bin/train-tagger), not a language model: tag with its run's "
            "model with bin/tag, or score it with bin/evaluate"
        )
    data = safe_torch_load(path, device)
    if isinstance(data, dict) and "architects" in data:  # nas.runs.search's checkpoint: α and the shared weights
        run = os.path.dirname(os.path.abspath(path))
        raise InputError(
            f"{path}: the checkpoint of a bin/search-lm run, not a language model: bin/compare-words "
            f"reads its run directory ({run}); to score its cell, retrain it with bin/train-lm --cell "
            f"{run}/genotype.json (written when the search ends)"
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a language model written by bin/train-lm")
    if data.get("version") != VERSION:
        raise InputError(f"{path}: model file version {data.get('version')!r}; this toolkit reads version {VERSION}")
    known = {f.name for f in fields(LMSpec)}
    try:
        spec = LMSpec(**{k: v for k, v in data["spec"].items() if k in known})
        if spec.kind not in KINDS:
            raise ValueError(f"unknown model kind {spec.kind!r}")
        vocab = data["vocab"]
        if not (isinstance(vocab, list) and len(vocab) == spec.ntoken and all(isinstance(w, str) for w in vocab)):
            raise ValueError(f"the vocabulary does not hold {spec.ntoken} words")
        model = build_lm(spec, backend).to(device)
        model.load_state_dict(data["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise InputError(f"{path}: model file is damaged ({str(err).splitlines()[0][:200]})") from None
    model.eval()
    return model, data
