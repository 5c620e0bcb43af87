"""BiRNN-CRF sequence taggers (flair) whose recurrent layer is a cell found by `nas` search.

`tagger.load_tagger(path)` loads a saved tagger (see `tagger.model`). It is looked up on first use,
so importing `tagger` (as every command does before parsing its flags) does not load flair or torch.
"""


def __getattr__(name: str):
    if name == "load_tagger":
        from .model import load_tagger

        return load_tagger
    raise AttributeError(f"module 'tagger' has no attribute {name!r}")
