"""Language-modelling corpora in PTB / WikiText form: one line per sentence, `<eos>` added per line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from nas.common.errors import InputError
from nas.common.files import utf8_lines

EOS, UNK = "<eos>", "<unk>"


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
        return cls(
            vocab,
            encode(train, vocab),
            encode(read_tokens(paths["valid"]), vocab),
            encode(read_tokens(paths["test"]), vocab),
            paths,
        )


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


def batchify(
    ids: torch.Tensor, batch_size: int, bptt: int, path: Path | str, flags: str = "--batch-size or --bptt"
) -> torch.Tensor:
    """(steps, batch) columns as in the DARTS/AWD code; too short a split is an InputError naming
    `flags`, the flags that set this batch's size."""
    steps = ids.numel() // batch_size
    if steps < bptt + 1:
        raise InputError(
            f"{path}: {ids.numel()} tokens is shorter than one batch of {batch_size} rows of "
            f"{bptt + 1} tokens; lower {flags}"
        )
    return ids[: steps * batch_size].view(batch_size, steps).t().contiguous()
