"""Character language models for Flair embeddings, trained offline with flair's LanguageModelTrainer.

Pretrained Flair LMs download from the internet, which no machine of this project can reach, so
we train our own. The character dictionary is built from the corpus (never
`Dictionary.load('chars')`, which downloads), and the corpus is laid out the way flair wants it:
`train/` split files, `valid.txt`, `test.txt`.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import random
import signal
import time
import types
from collections import Counter
from pathlib import Path

import flair
import torch
from flair.data import Dictionary
from flair.models import LanguageModel
from flair.trainers.language_model_trainer import LanguageModelTrainer, TextCorpus

from nas.common.errors import InputError
from nas.common.files import atomic_torch_save, atomic_write_text, utf8_lines


def read_corpus(source: str | Path) -> dict[str, list[str]]:
    """Lines of train/valid/test: a directory with those splits (PTB/WikiText names), or one file
    whose lines are split 90/5/5 in a seeded shuffle of paragraphs."""
    source = Path(source)
    if source.is_dir():
        from nas.common.splits import find_splits

        return {split: [line for _, line in utf8_lines(path)] for split, path in find_splits(source).items()}
    if not source.is_file():
        raise InputError(f"{source}: no such file or directory")
    lines = [line for _, line in utf8_lines(source)]
    if sum(len(line) for line in lines) < 1000:
        raise InputError(f"{source}: too little text for a character LM (need at least 1,000 characters)")
    order = list(range(len(lines)))
    random.Random(0).shuffle(order)
    cut = max(1, len(lines) // 20)
    pick = lambda idx: [lines[i] for i in sorted(idx)]  # noqa: E731 - keeps document order inside a split
    return {"valid": pick(order[:cut]), "test": pick(order[cut : 2 * cut]), "train": pick(order[2 * cut :])}


def layout(splits: dict[str, list[str]], root: Path, split_chars: int = 2_000_000) -> Path:
    """Write flair's corpus layout under `root`: train split files of about `split_chars` characters
    (flair validates and saves best-lm.pt after each one), valid.txt and test.txt."""
    (root / "train").mkdir(parents=True, exist_ok=True)
    chunk, size, k = [], 0, 0
    for line in splits["train"] + [None]:
        if line is not None:
            chunk.append(line)
            size += len(line) + 1
        if chunk and (line is None or size >= split_chars):
            atomic_write_text(root / "train" / f"train_split_{k:04d}", "\n".join(chunk) + "\n")
            chunk, size, k = [], 0, k + 1
    for split in ("valid", "test"):
        text = "\n".join(splits[split]) + "\n"
        if len(text) < 200:
            raise InputError(f"the {split} split has {len(text)} characters; a character LM needs at least 200")
        atomic_write_text(root / f"{split}.txt", text)
    return root


def char_dictionary(lines: list[str]) -> Dictionary:
    """Characters of the train text, most frequent first, plus flair's <unk> and the newline delimiter."""
    counts = Counter("\n".join(lines) + "\n")
    dictionary = Dictionary(add_unk=True)
    for char, _ in counts.most_common():
        dictionary.add_item(char)
    return dictionary


def train_charlm(
    corpus: str | Path,
    out: str | Path,
    direction: str = "forward",
    hidden: int = 256,
    embedding: int = 100,
    epochs: int | None = None,
    time_budget: float | None = None,
    sequence_length: int = 250,
    batch_size: int = 100,
    lr: float = 20.0,
    seed: int = 1,
    device: str = "cpu",
    split_chars: int = 2_000_000,
) -> dict:
    """Train a character LM; writes OUT/best-lm.pt (flair's format, loadable with weights_only=True)."""
    if torch.device(device).type == "cpu" and torch.cuda.is_available():
        raise InputError(
            "--device cpu: flair's LanguageModelTrainer refuses to train on the CPU where CUDA is "
            "available; use --device cuda"
        )
    out = Path(out)
    splits = read_corpus(corpus)
    flair.device = torch.device(device)
    random.seed(seed)
    torch.manual_seed(seed)
    root = layout(splits, out / "corpus", split_chars)
    dictionary = char_dictionary(splits["train"])
    forward = direction == "forward"
    text = TextCorpus(root, dictionary, forward, character_level=True)
    model = _SafeSavingLM(dictionary, forward, hidden_size=hidden, nlayers=1, embedding_size=embedding)
    trainer = LanguageModelTrainer(model, text)
    started = time.time()
    with _time_budget(time_budget):
        trainer.train(
            out,
            sequence_length=sequence_length,
            mini_batch_size=batch_size,
            learning_rate=lr,
            max_epochs=epochs if epochs is not None else 10_000,
            num_workers=0,
        )
    best = out / "best-lm.pt"
    if not best.is_file():
        raise InputError("training stopped before the first train split finished; raise --time-budget or --epochs")
    lm = load_charlm(best)
    valid = trainer._batchify(text.valid, batch_size)
    trainer.model = lm
    valid_nll = trainer.evaluate(valid, batch_size, sequence_length)
    return {
        "valid_bpc": valid_nll / math.log(2),
        "seconds": time.time() - started,
        "characters": {k: sum(len(line) + 1 for line in v) for k, v in splits.items()},
        "dictionary_size": len(dictionary),
        "parameters": sum(p.numel() for p in lm.parameters()),
        "size_bytes": best.stat().st_size,
    }


@contextlib.contextmanager
def _time_budget(minutes: float | None):
    """A KeyboardInterrupt once `minutes` have passed (None: never), which flair's trainer takes as "stop and
    test the best model"."""
    if minutes is None:
        yield
        return
    previous = signal.signal(signal.SIGALRM, _stop_training)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _stop_training(signum, frame):
    raise KeyboardInterrupt


class _SafeSavingLM(LanguageModel):
    """flair's LanguageModel, saved with the same keys but pickle's default protocol and atomically.

    flair pickles with protocol 4, which torch's weights_only loader cannot read; this file loads
    both with flair's own `LanguageModel.load_language_model` and with `load_charlm` below (through
    weights_only=True, the stricter of its two paths).
    """

    def save(self, file) -> None:
        atomic_torch_save(
            file,
            {
                "state_dict": self.state_dict(),
                "dictionary": self.dictionary,
                "is_forward_lm": self.is_forward_lm,
                "hidden_size": self.hidden_size,
                "nlayers": self.nlayers,
                "embedding_size": self.embedding_size,
                "nout": self.nout,
                "document_delimiter": self.document_delimiter,
                "dropout": self.dropout,
                "recurrent_type": self.recurrent_type,
                "has_decoder": self.decoder is not None,
            },
        )


_ALLOWED_GLOBALS = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
    ("_codecs", "encode"),  # how pickle protocol 2 spells bytes
    ("flair.data", "Dictionary"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds tensors, ordered dicts and flair's `Dictionary`; any other global in the pickle is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refused to load global {module}.{name}")
        return super().find_class(module, name)


# torch.load takes a pickle module; this one only builds the allow-listed globals above.
_RESTRICTED_PICKLE = types.SimpleNamespace(
    __name__="restricted_pickle",
    Unpickler=_RestrictedUnpickler,
    load=lambda file, **kw: _RestrictedUnpickler(file, **kw).load(),
)


def load_charlm(path: str | Path, has_decoder: bool = True) -> LanguageModel:
    """A flair character LM from a .pt file without running pickled code.

    Our own files load with weights_only=True (flair's Dictionary allow-listed). Files flair itself
    wrote use pickle protocol 4, which torch's weights_only reader cannot parse; they are read
    through `_RestrictedUnpickler` instead, which allows the same globals and nothing else.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: no such file (give a local Flair character LM .pt, e.g. one made by bin/train-charlm)"
        )
    try:
        with torch.serialization.safe_globals([Dictionary]):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        if "149" not in str(err):  # 149: pickle protocol 4's FRAME opcode
            raise InputError(f"{path}: not a Flair character LM that can be loaded safely") from None
        try:
            state = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_RESTRICTED_PICKLE)
        except Exception as err4:
            raise InputError(
                f"{path}: not a Flair character LM that can be loaded safely ({str(err4)[:200]})"
            ) from None
    keys = {"state_dict", "dictionary", "is_forward_lm", "hidden_size", "nlayers", "embedding_size", "nout"}
    if not isinstance(state, dict) or not keys <= set(state):
        raise InputError(f"{path}: not a Flair character LM (missing {sorted(keys - set(state or {}))})")
    lm = LanguageModel(
        dictionary=state["dictionary"],
        is_forward_lm=state["is_forward_lm"],
        hidden_size=state["hidden_size"],
        nlayers=state["nlayers"],
        embedding_size=state["embedding_size"],
        nout=state["nout"],
        document_delimiter=state.get("document_delimiter", "\n"),
        dropout=state.get("dropout", 0.1),
        recurrent_type=state.get("recurrent_type", "lstm"),
        has_decoder=has_decoder and state.get("has_decoder", True),
    )
    lm.load_state_dict(state["state_dict"], strict=has_decoder and state.get("has_decoder", True))
    lm.eval()
    lm.to(flair.device)  # flair's LanguageModel._apply returns None, so .to() cannot be chained
    return lm
