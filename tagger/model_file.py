"""The tagger's model file: flair's own model state, saved so that a weights-only loader reads it too.

flair saves a model's `_get_state_dict()` with pickle protocol 4 and loads it with
`weights_only=False`, so loading a crafted file runs its code. Here the same state is saved with
torch's default protocol, which torch's weights-only unpickler reads: the state holds tensors,
plain containers and two data classes, flair's `Dictionary` (tags, characters) and `io.BytesIO` (a
transformer's tokenizer files), which `load` allows and nothing else, so nothing in a file can name
code to run. flair's own `SequenceTagger.load` reads the same file unchanged (an `lstm` tagger is
stored as a plain `SequenceTagger`). flair itself unpickles without restriction; once `tagger` is
imported, its loaders read every local model file through `read_for_flair` (`teach_flair_safe_loading`):
a file that needs pickled code to load is refused in one line, never run.

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
from nas.common.files import MAX_JSON_DEPTH, atomic_torch_save, nesting_depth, safe_torch_load
from nas.lm.model_file import FORMAT as LM_FORMAT

from .pooled_memory import memory_problem

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
    data = safe_torch_load(path, allowed=_allowed())
    _check_depth(data, path)
    if isinstance(data, dict) and MARKER in data:
        if data[MARKER] != VERSION:
            raise InputError(f"{path}: tagger model format {data[MARKER]!r}; this toolkit reads format {VERSION}")
        state = {k: v for k, v in data.items() if k != MARKER}
        problem = state_problem(state)
        if problem:
            raise InputError(f"{path}: {problem}")
        return state
    if isinstance(data, dict) and data.get("format") == STATES_FORMAT:
        raise InputError(
            f"{path}: character-LM states (the cache of a character LM's outputs that --charlm-states keeps), "
            "not a tagger model"
        )
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


STATES_FORMAT = "nas_charlm_states"  # tagger.charlm_states.FORMAT, told apart from a model


def state_problem(state: dict) -> str | None:
    """What is wrong with a tagger's model state, field by field ("field 'X': ..."), before flair
    rebuilds it (None: nothing): its embeddings, their names, the pooled-Flair memory, the tags and
    the weights."""
    import torch
    from flair.data import Dictionary

    if "embeddings" not in state:
        return "field 'embeddings': missing (the model was saved without its embeddings, which it cannot tag without)"
    if not isinstance(state.get("tag_dictionary"), Dictionary):
        kind = type(state.get("tag_dictionary")).__name__
        return f"field 'tag_dictionary': must be flair's Dictionary of tags, got {kind}"
    weights = state.get("state_dict")
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        return "field 'state_dict': must map names to tensors (the model's weights)"
    todo = [("embeddings", state["embeddings"])]
    while todo:
        where, params = todo.pop()
        if not isinstance(params, dict) or not isinstance(params.get("__cls__"), str):
            return f"field {where!r}: must be flair's saved embeddings (an object naming its '__cls__')"
        name = params.get("name")
        if "name" in params and not (isinstance(name, str) and name.strip()):
            return f"field '{where}.name': must be a name (a non-empty string), got {name!r}"
        if params.get("memory") is not None:
            problem = memory_problem(params["memory"])
            if problem:
                return f"field '{where}.memory{problem}"
        members = params.get("embeddings")
        if params["__cls__"] == "StackedEmbeddings":
            if not isinstance(members, list) or not members:
                return f"field '{where}.embeddings': must be a list of embeddings"
            todo += [(f"{where}.embeddings[{k}]", member) for k, member in enumerate(members)]
    return None


def _check_depth(data: Any, path: str | os.PathLike) -> None:
    if nesting_depth(data) > MAX_JSON_DEPTH:  # flair rebuilds a model by recursion: a RecursionError
        raise InputError(f"{path}: a model state nested more than {MAX_JSON_DEPTH} levels deep; not a model file")


def _allowed() -> tuple[type, ...]:
    from flair.data import Dictionary

    return (Dictionary, io.BytesIO)


def read_for_flair(path: str | os.PathLike) -> dict:
    """A model file read for flair's own loaders, as `load` reads it: tensors, plain containers,
    flair's `Dictionary` and `BytesIO`; also a file flair saved itself that needs nothing more. A
    file whose pickle names anything else is an InputError, and none of its code runs."""
    data = safe_torch_load(path, allowed=_allowed(), flair_files=True)
    _check_depth(data, path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a flair model file (it holds a {type(data).__name__}, not a model state)")
    data.pop(MARKER, None)
    return data


def teach_flair_safe_loading() -> None:
    """Make flair's `Model.load` (behind `SequenceTagger.load`, `Classifier.load` and the rest) and
    its `load_torch_state` read model files through `read_for_flair`, never with `weights_only=False`.

    A local file is read before flair's lookup, so that `Classifier.load`, which tries each model
    class in turn and reports any failure as "not found on the ModelHub", says why the file was
    refused; a model name flair downloads is read through the same function once fetched. Called
    once, when `tagger.model` is imported."""
    import flair.file_utils
    import flair.nn.model
    from flair.nn import Model

    if getattr(flair.nn.model.load_torch_state, "reads_safely", False):
        return

    def load_torch_state(model_file: str) -> dict:
        return read_for_flair(model_file)

    load_torch_state.reads_safely = True
    flair.nn.model.load_torch_state = flair.file_utils.load_torch_state = load_torch_state
    flair_load = Model.__dict__["load"].__func__

    def load(cls, model_path):
        if not isinstance(model_path, dict) and os.path.isfile(model_path):
            model_path = read_for_flair(model_path)
        return flair_load(cls, model_path)

    Model.load = classmethod(load)


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
