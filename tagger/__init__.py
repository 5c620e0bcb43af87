"""BiRNN-CRF sequence taggers (flair) whose recurrent layer is a cell found by `nas` search.

`tagger.load_tagger(path)` loads a saved tagger (see `tagger.model`); `tagger.train_tagger(config, run_dir)`
trains one exactly as `bin/train-tagger` does, from a `tagger.TaggerConfig` (see `tagger.training`). They are
looked up on first use, so importing `tagger` (as every command does before parsing its flags) does not
load flair or torch.

Importing `tagger` is enough for flair's own loaders (`SequenceTagger.load`) to rebuild this
toolkit's taggers and the pooled-Flair memory: `tagger.model`, which teaches them, is imported now
if flair is loaded already, else as soon as flair has finished loading.
"""

import importlib
import importlib.abc
import importlib.util
import sys


class _AfterFlair(importlib.abc.MetaPathFinder):
    """Finds flair's package as usual, and imports `tagger.model` once flair has run its `__init__`."""

    def find_spec(self, name, path, target=None):
        if name != "flair":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_flair = spec.loader.exec_module

        def exec_module(module) -> None:
            run_flair(module)
            importlib.import_module("tagger.model")

        spec.loader.exec_module = exec_module
        return spec


if "flair" in sys.modules:
    importlib.import_module("tagger.model")
elif not any(isinstance(finder, _AfterFlair) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterFlair())


def __getattr__(name: str):
    if name == "load_tagger":
        from .model import load_tagger

        return load_tagger
    if name == "train_tagger":
        from .training import train_tagger

        return train_tagger
    if name == "TaggerConfig":
        from .config import TaggerConfig

        return TaggerConfig
    raise AttributeError(f"module 'tagger' has no attribute {name!r}")
