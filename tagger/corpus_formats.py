"""The corpus formats the tagger commands know: each one's columns, tag scheme, separator and files.

A light module (no flair, no torch), so the commands can offer the formats as choices in
`--help` at once; `corpora` reads the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Format:
    """How one corpus is laid out: its columns, default tag column and scheme, separator and files."""

    columns: dict[int, str]
    tag_column: str
    scheme: str
    separator: str  # "space" or "tab"
    files: dict[str, str] = field(default_factory=dict)  # split -> file name in --data; no dev: sampled


FORMATS = {
    "conll03": Format(
        {0: "text", 1: "pos", 2: "chunk", 3: "ner"},
        "ner",
        "iob1",
        "space",
        {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"},
    ),
    "wnut17": Format(
        {0: "text", 1: "ner"},
        "ner",
        "iob2",
        "tab",
        {"train": "wnut17train.conll", "dev": "emerging.dev.conll", "test": "emerging.test.annotated"},
    ),
    "conll2000": Format(
        {0: "text", 1: "pos", 2: "chunk"}, "chunk", "iob2", "space", {"train": "train.txt", "test": "test.txt"}
    ),
}
