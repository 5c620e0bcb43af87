"""The tagger's model file: flair's own model state, saved so that a weights-only loader reads it too.

flair saves a model's `_get_state_dict()` with pickle protocol 4 and loads it with
`weights_only=False`, so loading a crafted file runs its code. Here the same state is saved with
torch's default protocol, which torch's weights-only unpickler reads: the state holds tensors,
plain containers and two data classes, flair's `Dictionary` (tags, characters) and `io.BytesIO` (a
transformer's tokenizer files), which `load` allows and nothing else, so nothing in a file can name
code to run. flair's own `SequenceTagger.load` reads the same file unchanged (an `lstm` tagger is
stored as a plain `SequenceTagger`), but it unpickles without restriction: give it only files you
trust, and load others with `load` (`tagger.load_tagger`).

A `Dictionary`'s lookup cache (`item2idx_not_encoded`, a `defaultdict` flair builds on first use)
is left out of the file; flair rebuilds it. Files of format 1 (earlier versions of this toolkit,
which re-encoded the state into plain containers that flair could not read) still load.
"""

from __future__ import annotations

import copy
import io
import json
import os
from typing import Any


from nas.common.errors import InputError
from nas.common.files import atomic_torch_save, safe_torch_load
from nas.lm.model_file import FORMAT as LM_FORMAT

MARKER, VERSION = "nas_tagger_format", 2
CHECKPOINT_FORMAT = "nas-tagger-checkpoint"  # a training's checkpoint.pt (tagger.resume), told apart from a model
_FORMAT_1 = "nas-tagger-model"  # format 1: {"format": _FORMAT_1, "version": 1, "state": re-encoded state}
_DICTIONARY, _BYTES = "__flair_dictionary__", "__bytes__"  # how format 1 spelled a Dictionary and a BytesIO


def save(path: str | os.PathLike, state: dict) -> None:
    """Write a flair model state atomically; the model card is reduced to JSON values."""
    state = {**state, MARKER: VERSION}
    if state.get("model_card") is not None:
        state["model_card"] = json.loads(json.dumps(state["model_card"], default=str))
    atomic_torch_save(path, _without_caches(state))


def load(path: str | os.PathLike) -> dict:
    """Read a model state with weights_only=True; a file of another kind is an InputError."""
    from flair.data import Dictionary

    data = safe_torch_load(path, allowed=(Dictionary, io.BytesIO))
    if isinstance(data, dict) and MARKER in data:
        if data[MARKER] != VERSION:
            raise InputError(f"{path}: tagger model format {data[MARKER]!r}; this toolkit reads format {VERSION}")
        return {k: v for k, v in data.items() if k != MARKER}
    if isinstance(data, dict) and data.get("format") == _FORMAT_1 and data.get("version") == 1:
        state = _decode_format_1(data["state"])
        if data.get("model_card"):
            state["model_card"] = json.loads(data["model_card"])
        return state
    if isinstance(data, dict) and data.get("format") == CHECKPOINT_FORMAT:
        run = os.path.dirname(os.path.abspath(path))
        raise InputError(
            f"{path}: the training checkpoint of a bin/train-tagger run, not a saved model: give the run "
            f"directory ({run}) or its best-model.pt, or continue the run with bin/train-tagger --resume "
            f"{run}"
        )
    if isinstance(data, dict) and data.get("format") == LM_FORMAT:
        raise InputError(f"{path}: a language model (bin/train-lm), not a tagger: evaluate it with bin/eval-lm")
    raise InputError(f"{path}: not a tagger model of this toolkit (no '{MARKER}' marker)")


def _without_caches(obj: Any) -> Any:
    """The state with every `Dictionary` copied without its lookup cache (the state itself is untouched)."""
    from flair.data import Dictionary

    if isinstance(obj, Dictionary) and hasattr(obj, "item2idx_not_encoded"):
        plain = copy.copy(obj)
        del plain.item2idx_not_encoded
        return plain
    if isinstance(obj, dict):
        return type(obj)((k, _without_caches(v)) for k, v in obj.items())  # keeps OrderedDict
    if isinstance(obj, (list, tuple)):
        return type(obj)(_without_caches(v) for v in obj)
    return obj


def _decode_format_1(obj: Any) -> Any:
    """Format 1's tagged plain values back into flair's `Dictionary` and `BytesIO`."""
    from flair.data import Dictionary

    if isinstance(obj, dict):
        if set(obj) == {_DICTIONARY}:
            data = obj[_DICTIONARY]
            dictionary = Dictionary(add_unk=False)
            dictionary.idx2item = [item.encode("utf-8", "surrogateescape") for item in data["items"]]
            dictionary.item2idx = {item: i for i, item in enumerate(dictionary.idx2item)}
            dictionary.add_unk, dictionary.multi_label, dictionary.span_labels = (
                data["add_unk"],
                data["multi_label"],
                data["span_labels"],
            )
            return dictionary
        if set(obj) == {_BYTES}:
            return io.BytesIO(obj[_BYTES].numpy().tobytes())
        return type(obj)((k, _decode_format_1(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_decode_format_1(v) for v in obj)
    return obj
