"""Load a flair character language model (`.pt`) without running pickled code.

flair writes its language models with `torch.save(..., pickle_protocol=4)` and a pickled
`flair.data.Dictionary` inside; torch's `weights_only=True` loader rejects protocol 4 outright, and
flair's own loader uses `weights_only=False`, which would run whatever a crafted file asks for.
Here torch reads the file through a restricted unpickler: only tensor rebuilding, ordered dicts and
flair's character `Dictionary` may be constructed, so any other global in the pickle is refused.
"""
from __future__ import annotations

import collections
import pickle
import types
from pathlib import Path

import torch

from nas.errors import InputError

_ALLOWED = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("_codecs", "encode"),  # how protocol 2 spells bytes
    ("flair.data", "Dictionary"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refused to load global {module}.{name}")
        return super().find_class(module, name)


def _load(file, **kwargs):
    return _Unpickler(file, **kwargs).load()


_RESTRICTED = types.SimpleNamespace(__name__="restricted_pickle", Unpickler=_Unpickler, load=_load)


def load_char_lm(path: str | Path, where: str):
    """A flair `LanguageModel` from a local file, as `FlairEmbeddings` loads it (no decoder)."""
    from flair.data import Dictionary
    from flair.models import LanguageModel

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file ({where})")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RESTRICTED)
    except Exception as err:  # refused globals, foreign or corrupt files
        raise InputError(f"{path}: not a flair character language model, or corrupt ({str(err)[:200]})") from None
    keys = ("dictionary", "is_forward_lm", "hidden_size", "nlayers", "embedding_size", "nout", "dropout", "state_dict")
    if not isinstance(state, dict) or any(k not in state for k in keys) or not isinstance(state["dictionary"], Dictionary):
        raise InputError(f"{path}: not a flair character language model (expected the fields {', '.join(keys)})")
    model = LanguageModel(
        dictionary=state["dictionary"], is_forward_lm=state["is_forward_lm"], hidden_size=state["hidden_size"],
        nlayers=state["nlayers"], embedding_size=state["embedding_size"], nout=state["nout"],
        document_delimiter=state.get("document_delimiter", "\n"), dropout=state["dropout"],
        recurrent_type=state.get("recurrent_type", "lstm"), has_decoder=False,
    )
    weights = collections.OrderedDict((k, v) for k, v in state["state_dict"].items() if not k.startswith("decoder."))
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise InputError(f"{path}: weights do not fit the model the file describes ({str(err)[:200]})") from None
    return model.eval()
