"""Language-modelling corpora in PTB / WikiText form: one line per sentence, `<eos>` added per line."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import InputError
from .files import utf8_lines

SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"


def find_splits(data: str | Path | None, train: str | None = None, valid: str | None = None,
                test: str | None = None, needed: tuple[str, ...] = SPLITS) -> dict[str, Path]:
    """Locate the `needed` splits in DIR (`ptb.train.txt`, `wiki.valid.tokens`, `test.txt`, ...)."""
    given = {"train": train, "valid": valid, "test": test}
    found: dict[str, Path] = {}
    if data is not None:
        root = Path(data)
        if not root.is_dir():
            raise InputError(f"{root}: no such directory")
        for split in needed:
            if given[split]:
                continue
            matches = sorted(p for p in root.iterdir() if p.is_file() and split in p.name.split(".") or
                             p.is_file() and p.stem == split)
            if not matches:
                raise InputError(f"{root}: no {split} split (expected a file like ptb.{split}.txt, "
                                 f"wiki.{split}.tokens or {split}.txt, or pass --{split})")
            found[split] = matches[0]
    for split, name in given.items():
        if name:
            if not Path(name).is_file():
                raise InputError(f"{name}: no such file (--{split})")
            found[split] = Path(name)
    missing = [s for s in needed if s not in found]
    if missing:
        raise InputError(f"no {missing[0]} split: give --data DIR or --{missing[0]} FILE")
    return found


def read_tokens(path: Path) -> list[str]:
    tokens: list[str] = []
    for _, line in utf8_lines(path):
        words = line.split()
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    if not tokens:
        raise InputError(f"{path}: empty corpus (no tokens)")
    return tokens


@dataclass
class Corpus:
    """Token ids of each split; the vocabulary comes from train, unseen words map to `<unk>`."""

    vocab: list[str]
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    paths: dict[str, Path]

    @classmethod
    def load(cls, paths: dict[str, Path]) -> "Corpus":
        train = read_tokens(paths["train"])
        vocab = vocabulary(train)
        return cls(vocab, encode(train, vocab), encode(read_tokens(paths["valid"]), vocab),
                   encode(read_tokens(paths["test"]), vocab), paths)


def vocabulary(train: list[str]) -> list[str]:
    """Word types in order of first appearance in the training tokens, plus `<unk>`."""
    vocab = list(dict.fromkeys(train))
    if UNK not in vocab:
        vocab.append(UNK)
    return vocab


def encode(tokens: list[str], vocab: list[str]) -> torch.Tensor:
    """Token ids in `vocab` (which holds `<unk>`); words outside it become `<unk>`."""
    index = {w: i for i, w in enumerate(vocab)}
    unk = index[UNK]
    return torch.tensor([index.get(w, unk) for w in tokens], dtype=torch.long)


def batchify(ids: torch.Tensor, batch_size: int, bptt: int, path: Path | str) -> torch.Tensor:
    """(steps, batch) columns as in the DARTS/AWD code; too short a split is an InputError."""
    steps = ids.numel() // batch_size
    if steps < bptt + 1:
        raise InputError(f"{path}: {ids.numel()} tokens is shorter than one batch × bptt "
                         f"({batch_size} × {bptt + 1}); lower --batch-size or --bptt")
    return ids[: steps * batch_size].view(batch_size, steps).t().contiguous()
