"""Import flair without the libraries a saved GloVe / Flair / pooled-Flair tagger never uses.

`import flair` runs flair's `__init__`, which imports every flair model and embedding class, and
with them `transformers` (its auto classes pull in scikit-learn, SciPy and pandas), scikit-learn
and SciPy (text-classification and clustering models, regression metrics), boto3 (S3 downloads)
and matplotlib (training curves): about two thirds of the 5-8 s before `bin/tag` writes its first
line (figures in docs/speed.md, "Start-up"). None of them is used to predict with a tagger whose
embeddings are word vectors, character LMs or pooled Flair embeddings.

`without_unused_libraries(model)` is called by `bin/tag` and `bin/evaluate` before they import
flair, and only when the model file names no transformer embedding (a look at its pickle's bytes,
nothing unpickled). Until flair has been imported, each of those packages is a stand-in module:
`from transformers import AutoModel` binds a `Deferred` name, which imports the real package the
first time it is called, subclassed, looked into or used in `isinstance`. So a model that needs one
after all still works, only without the saving; after flair's import (`release`) a new `import` of
any of them gets the real package. flair's files on disk are not touched. `NAS_TAGGER_FULL_IMPORT=1`
switches this off (flair imported as usual), e.g. to compare (bench/startup.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from pathlib import Path

# Imported by flair's __init__ (directly or through its model and embedding modules) and used only
# by transformer embeddings, classifiers, clustering, regression metrics, downloads and plots.
UNUSED = ("transformers", "transformer_smaller_training_vocab", "sklearn", "scipy", "boto3", "botocore", "matplotlib")
SWITCH = "NAS_TAGGER_FULL_IMPORT"
TRANSFORMER_MARK = b"Transformer"  # in the class name of every flair transformer embedding (its "__cls__")
MODEL_FILES = ("best-model.pt", "final-model.pt")  # what tagger.model.load_tagger takes from a run directory


class Deferred:
    """A name imported from a stand-in: the real object, imported on first real use."""

    __slots__ = ("_path",)

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "_path", path)

    def _real(self):
        release()  # from now on the real packages
        module, _, name = self._path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            return importlib.import_module(self._path)  # a submodule (`from scipy import sparse`)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # typing and inspect probe dunders (`Optional[AutoConfig]`): no import for them
            raise AttributeError(name)
        return getattr(self._real(), name)

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)

    def __mro_entries__(self, bases):
        return (self._real(),)

    def __instancecheck__(self, instance) -> bool:
        return isinstance(instance, self._real())

    def __subclasscheck__(self, subclass) -> bool:
        return issubclass(subclass, self._real())

    def __lt__(self, other):
        return self._real() < other

    def __le__(self, other):
        return self._real() <= other

    def __gt__(self, other):
        return self._real() > other

    def __ge__(self, other):
        return self._real() >= other

    def __getitem__(self, key):
        return self._real()[key]

    def __contains__(self, item) -> bool:
        return item in self._real()

    def __iter__(self):
        return iter(self._real())

    def __len__(self) -> int:
        return len(self._real())

    def __bool__(self) -> bool:
        return bool(self._real())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<deferred {self._path}>"


class StandIn(types.ModuleType):
    """A module of the UNUSED packages until flair is imported: its attributes are `Deferred`."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # __version__, __file__ ...: the real module's
            release()
            return getattr(importlib.import_module(self.__name__), name)
        return Deferred(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if top in UNUSED and isinstance(sys.modules.get(top, StandIn(top)), StandIn):  # not one imported already
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


_FINDER = _Finder()


def install() -> None:
    """Serve the UNUSED packages that are not imported yet as stand-ins."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def release() -> None:
    """The real packages for every later import; names bound to `Deferred` objects keep working."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name, module in list(sys.modules.items()):
        if isinstance(module, StandIn):
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and getattr(sys.modules[parent], "__dict__", {}).get(child) is module:
                delattr(sys.modules[parent], child)


def model_file(model: str | os.PathLike) -> Path | None:
    """The file `tagger.model.load_tagger` would read for `model` (None: none there; its loader says why)."""
    path = Path(model)
    if path.is_dir():
        return next((path / name for name in MODEL_FILES if (path / name).is_file()), None)
    return path if path.is_file() else None


def needs_transformers(path: Path) -> bool:
    """Whether a model file may hold transformer embeddings: its pickle names a Transformer class
    (or it cannot be read as a torch zip file: the usual import, and the loader's own error)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if name is None:
                return True
            with archive.open(name) as pickle:
                tail = b""
                while chunk := pickle.read(1 << 22):
                    if TRANSFORMER_MARK in tail + chunk:
                        return True
                    tail = chunk[-len(TRANSFORMER_MARK) :]
                return False
    except Exception:  # damaged in any way (BadZipFile, OSError, EOFError, zlib.error ...): the loader says how
        return True


def without_unused_libraries(model: str | os.PathLike, scoring: bool = False) -> bool:
    """Import flair (and `tagger.model`, which flair's import brings in) with the UNUSED packages as
    stand-ins when the model file needs none of them; True when it did. Call before anything has
    imported flair; later calls, `NAS_TAGGER_FULL_IMPORT=1`, or a transformer model: the usual import.
    `scoring` (bin/evaluate): seqeval's metrics too, whose one use of scikit-learn is the warning class
    of `zero_division="warn"`, which `tagger.evaluation` never asks for; imported with the real
    packages, it brought in scikit-learn, SciPy and pandas, half of bin/evaluate's start-up.

    Only a command's own process takes it: one that has imported torch or flair already (a test, or
    Python code calling a command's `main`) keeps the usual import, so that the stand-ins never
    change a process they were not started for."""
    if os.environ.get(SWITCH, "") not in ("", "0") or "flair" in sys.modules or "torch" in sys.modules:
        return False
    path = model_file(model)
    if path is None or needs_transformers(path):
        return False
    install()
    try:
        import flair.models  # noqa: F401
        import tagger.model  # noqa: F401

        if scoring:
            import seqeval.metrics  # noqa: F401
    finally:
        release()
    return True
