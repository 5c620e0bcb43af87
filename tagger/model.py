"""The BiRNN-CRF tagger: flair's `SequenceTagger` whose recurrent layer is a frozen searched cell.

flair's `SequenceTagger(rnn=module)` trains but cannot reload (flair 0.15: "Unknown RNN type"). So `CellTagger`
overrides the `RNN(...)` factory flair calls while building the model: with a genotype it returns
a bidirectional `nas.cells.cell.FrozenRNN` (forward and backward weights of its own, with the ESS
inter-cell gates and the NASABN attention of the genotype when present), without one flair's own LSTM (`--cell lstm`,
the stock
BiLSTM-CRF). The genotype travels in the model state through `_get_state_dict` /
`_init_model_with_state_dict`, so a saved model rebuilds the same layer. Everything else is
flair's: word dropout, locked dropout on the RNN input and output, optional reprojection, the
linear layer, CRF and Viterbi decoding; the CRF's loss is flair's, computed from the emissions and
transitions (`tagger.crf`), and the reprojection skips the padding's products (`tagger.reprojection`).

Models are saved and loaded through `model_file`: flair's own state, read back with
`weights_only=True`, also when flair's `ModelTrainer` writes and reloads `best-model.pt`. The files
stay flair's: an `lstm` tagger is stored as a plain `SequenceTagger`, which
`flair.models.SequenceTagger.load` rebuilds without this toolkit; a tagger on a searched cell is
stored as a `CellTagger`. Once this module is imported, flair's own `SequenceTagger.load` and
`Classifier.load` return it (`teach_flair_the_cell_tagger`); without it, flair's error names that
import. `CellTagger.load` and `load_tagger` load it safely. Importing this module also makes every
loader save and restore the word memory of pooled Flair embeddings (`tagger.pooled_memory`), and
warn, in one line, about a model file that lacks it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from flair.models import SequenceTagger

import nas
from nas.common.errors import InputError
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype, validate
from nas.cells.ops import INIT_RANGE

from . import model_file
from .config import CELL_INITS
from .pooled_memory import (
    DEFAULT_MAX_WORDS,
    bound_pooled_memory,
    missing_memory,
    pooled_embeddings,
    repair_names,
    teach_flair_the_memory,
)
from .crf import CRFLoss, EmissionCRF, PairDecoder
from .packed import padded
from .reprojection import skipping_padding


class PackedCellRNN(nn.Module):
    """A bidirectional `FrozenRNN` behind the interface flair's tagger expects of an `nn.LSTM`.

    flair hands the layer a `PackedSequence` and reads `hidden_size`, `num_layers` and
    `bidirectional`; the cell runs on the padded batch with its lengths, so the backward direction
    starts at each sentence's own last token.
    """

    num_layers = 1
    bidirectional = True

    def __init__(
        self,
        genotype: Genotype,
        input_size: int,
        hidden_size: int,
        dropout_x: float = 0.0,
        dropout_h: float = 0.0,
        cell_init: str = "lstm",
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = FrozenRNN(
            genotype,
            input_size,
            hidden_size,
            directions=2,
            dropout_x=dropout_x,
            dropout_h=dropout_h,
            init_range=cell_init_range(cell_init, hidden_size),
        )

    def forward(self, packed: PackedSequence) -> tuple[PackedSequence, torch.Tensor]:
        x, lengths = padded(packed)  # (T, B, input)
        out, hidden = self.cell(x, lengths=lengths)
        return pack_padded_sequence(out, lengths, enforce_sorted=False), hidden


def cell_init_range(cell_init: str, hidden_size: int) -> float:
    """The bound of the cell's uniform initialisation: `darts` is the DARTS code's ±0.04, `lstm` is
    ±1/√hidden, the rule of flair's (PyTorch's) LSTM, and the tagger's default.

    DARTS's 0.04 is about 1/√hidden at the 850 units it was chosen for; at a tagger's sizes it is
    several times smaller, and the cell's output then hardly depends on its input at the start, so
    training starts slowly (docs/results.md, "Why the searched cell learned more slowly").
    """
    if cell_init not in CELL_INITS:
        raise ValueError(f"cell init {cell_init!r}: expected one of {', '.join(CELL_INITS)}")
    return INIT_RANGE if cell_init == "darts" else hidden_size**-0.5


def recurrent_layer(
    genotype: Genotype | None,
    input_size: int,
    hidden_size: int,
    dropout_x: float = 0.0,
    dropout_h: float = 0.0,
    cell_init: str = "lstm",
) -> nn.Module:
    """The tagger's bidirectional recurrent layer: the genotype's cell, or flair's own LSTM for None."""
    if genotype is None:
        return SequenceTagger.RNN("LSTM", 1, hidden_size, True, input_size)
    return PackedCellRNN(genotype, input_size, hidden_size, dropout_x, dropout_h, cell_init)


# Stored as the model's rnn_type: flair without this toolkit fails on it with "Unknown RNN type: <this>",
# so the one line a user sees says what to do.
CELL_RNN_TYPE = (
    "FrozenRNN, a searched cell of nas-tagger: run `import tagger` before flair's "
    "SequenceTagger.load, or load it with tagger.load_tagger(path)"
)


class CellTagger(SequenceTagger):
    """`SequenceTagger` with a searched cell or, with `genotype=None`, flair's BiLSTM."""

    def __init__(
        self,
        embeddings,
        tag_dictionary,
        tag_type: str,
        genotype: Genotype | None = None,
        cell_dropout_x: float = 0.0,
        cell_dropout_h: float = 0.0,
        cell_init: str = "lstm",
        **kwargs,
    ):
        # Read by RNN() during SequenceTagger.__init__, so set first (plain attributes are allowed
        # before nn.Module.__init__). `cell_init` only draws the starting weights, so it is not saved.
        self.genotype = genotype
        self.cell_dropout_x, self.cell_dropout_h, self.cell_init = cell_dropout_x, cell_dropout_h, cell_init
        kwargs.setdefault("rnn_type", CELL_RNN_TYPE if genotype is not None else "LSTM")
        super().__init__(embeddings, tag_dictionary, tag_type, **kwargs)
        if self.use_crf:  # flair's CRF, its loss from the emissions and transitions (tagger/crf.py)
            self.crf = EmissionCRF(self.crf.transitions)
            self.viterbi_decoder = PairDecoder(self.label_dictionary)
            self.loss_function = CRFLoss(self.label_dictionary)
        if self.reproject_embeddings:  # flair's linear layer, without products for the padding (tagger/reprojection.py)
            self.embedding2nn = skipping_padding(self.embedding2nn)

    def RNN(
        self, rnn_type: str, rnn_layers: int, hidden_size: int, bidirectional: bool, rnn_input_dim: int
    ) -> nn.Module:
        if rnn_layers != 1 or not bidirectional:
            raise ValueError("the cell tagger runs one bidirectional layer")
        return recurrent_layer(
            self.genotype, rnn_input_dim, hidden_size, self.cell_dropout_x, self.cell_dropout_h, self.cell_init
        )

    def _get_state_dict(self) -> dict:
        # Without a cell this is flair's BiLSTM-CRF exactly: stored under flair's class name, so flair
        # rebuilds it without this toolkit; with one, flair finds this class by name once imported.
        # `requires` says what a reader needs to rebuild it.
        cell = self.genotype is not None
        return {
            **super()._get_state_dict(),
            "__cls__": type(self).__name__ if cell else "SequenceTagger",
            "genotype": self.genotype.to_dict() if cell else None,
            "cell_dropout_x": self.cell_dropout_x,
            "cell_dropout_h": self.cell_dropout_h,
            "requires": requirements(self.genotype, bool(pooled_embeddings(self))),
        }

    @classmethod
    def _init_model_with_state_dict(cls, state, **kwargs):
        stored = state.get("genotype")  # a file's genotype is checked before a cell is built from it
        genotype = validate(stored, "model genotype") if stored is not None else None
        return super()._init_model_with_state_dict(
            state,
            genotype=genotype,
            cell_dropout_x=state.get("cell_dropout_x", 0.0),
            cell_dropout_h=state.get("cell_dropout_h", 0.0),
            **kwargs,
        )

    def save(self, model_file_path: str | os.PathLike, checkpoint: bool = False) -> None:
        state = self._get_state_dict()
        if self.model_card is not None:
            state["model_card"] = self.model_card
        model_file.save(model_file_path, state)

    @classmethod
    def load(cls, model_path: str | os.PathLike | dict) -> "CellTagger":
        """flair's `load`: a model file or run directory (read safely by `load_tagger`), or the state
        dict flair's `Classifier.load` has read and hands on by class name."""
        if isinstance(model_path, dict):
            return _from_state(dict(model_path), "the model state")
        return load_tagger(model_path)


def requirements(genotype: Genotype | None, pooled: bool = False) -> dict:
    """What rebuilding a saved tagger needs: flair alone for the BiLSTM, this toolkit for a searched
    cell, and for the word memory of pooled Flair embeddings (plain flair loads it empty)."""
    import flair

    needs = {"flair": flair.__version__}
    if pooled:
        needs["pooled_memory"] = (
            "saved in the file; restored by flair's loaders after `import tagger`, left empty by plain flair"
        )
    if genotype is None:
        return needs
    return {
        **needs,
        "nas-tagger": nas.__version__,
        "cell": genotype.to_dict(),
        "load": "import tagger, then flair's SequenceTagger.load or Classifier.load; or tagger.load_tagger",
    }


def teach_flair_the_cell_tagger() -> None:
    """Make flair's own `SequenceTagger.load` return a `CellTagger` for a state that holds a genotype.

    flair's loader rebuilds every state through `SequenceTagger._init_model_with_state_dict`, whose
    RNN factory knows only LSTM, GRU and RNN. Such a state is handed to `CellTagger`'s rebuild
    instead; every other state goes to flair's unchanged. Called once, when this module is imported.
    """
    flair_rebuild = SequenceTagger.__dict__["_init_model_with_state_dict"].__func__
    if getattr(flair_rebuild, "knows_cell_tagger", False):
        return

    def rebuild(cls, state, **kwargs):
        if cls is SequenceTagger and state.get("genotype") is not None:
            model = CellTagger._init_model_with_state_dict(state, **kwargs)
        else:
            model = flair_rebuild(cls, state, **kwargs)
        if cls is SequenceTagger:  # flair's own loader (this toolkit's warns in _from_state)
            warn_if_memory_missing(model, "the model")
        return model

    rebuild.knows_cell_tagger = True
    SequenceTagger._init_model_with_state_dict = classmethod(rebuild)


teach_flair_the_cell_tagger()
teach_flair_the_memory()
model_file.teach_flair_safe_loading()

log = logging.getLogger("tagger")


def warn_if_memory_missing(model, where: str) -> None:
    """Pooled embeddings of a file saved without their names get them back (`repair_names`), and
    one warning line says when it lacks their word memory."""
    repair_names(model)
    if missing_memory(model):
        log.warning(
            f"warning: {where}: saved without the word memory of its pooled Flair embeddings (by flair "
            "itself, or by nas-tagger before it saved the memory), so it tags from an empty memory and "
            "the scores reported for it do not hold; rebuild the memory from its training corpus with "
            "bin/export MODEL --rebuild-memory --out FILE"
        )


def load_tagger(path: str | os.PathLike, device: str | None = None, gemm: str = "auto") -> CellTagger:
    """Load a saved tagger (a model file, or a run directory holding best-model.pt / final-model.pt), its
    products on the GEMM rule `gemm` (`auto`: the host's)."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / "best-model.pt", path / "final-model.pt"]
        found = [c for c in candidates if c.is_file()]
        if not found:
            seeds = " (a --runs run: give one of its seed-* directories)" if any(path.glob("seed-*")) else ""
            raise InputError(f"{path}: no best-model.pt or final-model.pt in this directory{seeds}")
        path = found[0]
    return _from_state(model_file.load(path), str(path), device, gemm)


def load_for_prediction(
    path: str | os.PathLike, device: str | None = None, pooled_memory: int = DEFAULT_MAX_WORDS, gemm: str = "auto"
) -> CellTagger:
    """`load_tagger`, with the pooled-Flair memory bounded to its saved words and `pooled_memory`
    more (`tagger.pooled_memory`): the model `bin/tag`, `bin/evaluate` and a run's own test
    scoring predict with."""
    model = load_tagger(path, device, gemm)
    bound_pooled_memory(model, pooled_memory)
    return model


def _from_state(state: dict, where: str, device: str | None = None, gemm: str = "auto") -> CellTagger:
    """A tagger in eval mode on `device` (flair's device by default) from a flair model state."""
    import flair

    card = state.pop("model_card", None)
    state.pop("__cls__", None)
    state.pop("requires", None)
    try:
        model = CellTagger._init_model_with_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise InputError(f"{where}: the tagger model does not rebuild ({str(err)[:200]})") from None
    model.model_card = card
    warn_if_memory_missing(model, where)
    from nas.speed import attach, for_prediction

    model.eval()
    model.to(torch.device(device) if device else flair.device)
    return attach(model, for_prediction(device or flair.device, gemm))
