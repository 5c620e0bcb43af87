"""The tagger's model file: flair's model state as tensors and plain containers only.

flair saves a model by pickling its state (embedding objects, `Dictionary`s, `BytesIO`s) with
protocol 4 and loads it with `weights_only=False`, so loading a crafted file runs its code. Here
the same state (`_get_state_dict()`) is encoded into dicts, lists, strings, numbers and tensors,
saved with torch's default protocol, and read back with `weights_only=True`
(`common.files.safe_torch_load`): nothing in the file can name code to run.
"""
from __future__ import annotations

import io
import json
import os
from typing import Any

import torch

from common.errors import InputError
from common.files import atomic_torch_save, safe_torch_load

FORMAT = "nas-tagger-model"
VERSION = 1
_DICTIONARY, _BYTES = "__flair_dictionary__", "__bytes__"


def encode(obj: Any, where: str = "state") -> Any:
    """Plain containers and tensors stay; flair `Dictionary` and `BytesIO` become tagged plain values."""
    from flair.data import Dictionary

    if obj is None or isinstance(obj, (bool, int, float, str, torch.Tensor)):
        return obj
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError(f"{where}: dict keys must be strings or integers")
        return type(obj)((k, encode(v, f"{where}.{k}")) for k, v in obj.items())  # keeps OrderedDict
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, Dictionary):
        return {_DICTIONARY: {"items": [item.decode("utf-8", "surrogateescape") for item in obj.idx2item],
                              "add_unk": obj.add_unk, "multi_label": obj.multi_label, "span_labels": obj.span_labels}}
    if isinstance(obj, io.BytesIO):
        return {_BYTES: torch.frombuffer(bytearray(obj.getvalue()), dtype=torch.uint8)}
    raise TypeError(f"{where}: a {type(obj).__name__} cannot be stored in a tagger model file")


def decode(obj: Any) -> Any:
    from flair.data import Dictionary

    if isinstance(obj, dict):
        if set(obj) == {_DICTIONARY}:
            data = obj[_DICTIONARY]
            dictionary = Dictionary(add_unk=False)
            dictionary.idx2item = [item.encode("utf-8", "surrogateescape") for item in data["items"]]
            dictionary.item2idx = {item: i for i, item in enumerate(dictionary.idx2item)}
            dictionary.add_unk, dictionary.multi_label, dictionary.span_labels = (
                data["add_unk"], data["multi_label"], data["span_labels"])
            return dictionary
        if set(obj) == {_BYTES}:
            return io.BytesIO(obj[_BYTES].numpy().tobytes())
        return type(obj)((k, decode(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode(v) for v in obj)
    return obj


def save(path: str | os.PathLike, state: dict) -> None:
    """Write a model state atomically; the model card is kept as JSON text."""
    state = dict(state)
    card = state.pop("model_card", None)
    atomic_torch_save(path, {"format": FORMAT, "version": VERSION, "state": encode(state),
                             "model_card": json.dumps(card, default=str) if card is not None else None})


def load(path: str | os.PathLike) -> dict:
    """Read a model state with weights_only=True; a file of another kind is an InputError."""
    data = safe_torch_load(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{path}: not a tagger model of this toolkit (no '{FORMAT}' marker)")
    if data.get("version") != VERSION:
        raise InputError(f"{path}: tagger model version {data.get('version')!r}; this toolkit reads version {VERSION}")
    state = decode(data["state"])
    if data.get("model_card"):
        state["model_card"] = json.loads(data["model_card"])
    return state
