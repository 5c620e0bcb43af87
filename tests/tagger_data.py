"""Small generated tagging corpora and word vectors for the tagger tests (no shared data needed).

Sentences come from templates with person, location and organisation names; the generator counts
the entities it places, so tests compare the readers against an independent count.
"""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

NAMES = {
    "PER": ["Anna", "Boris", "Chen", "Dara", "Emil", "Fatou", "Goran", "Hana"],
    "LOC": ["Paris", "Lima", "Oslo", "Accra", "Hanoi", "Quito"],
    "ORG": ["Acme", "Globex", "Initech", "Umbrella", "Hooli"],
}
FILLER = ["the", "a", "visited", "met", "saw", "near", "with", "and", "today", "yesterday", "went", "to", "for"]


def _entity(rng: random.Random, kind: str) -> list[str]:
    return rng.sample(NAMES[kind], rng.choice([1, 1, 2]))


def sentences(n: int, seed: int) -> list[list[tuple[str, str | None, bool]]]:
    """Each sentence: (word, entity type or None, starts an entity) per token.

    Some sentences hold two adjacent entities of one type, which IOB1 must separate with B-.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tokens: list[tuple[str, str | None, bool]] = []
        for _ in range(rng.randint(1, 3)):
            tokens += [(w, None, False) for w in rng.sample(FILLER, rng.randint(1, 3))]
            kind = rng.choice(list(NAMES))
            repeats = 2 if i % 5 == 0 else 1  # adjacent same-type entities
            for _ in range(repeats):
                for k, word in enumerate(_entity(rng, kind)):
                    tokens.append((word, kind, k == 0))
        tokens.append((".", None, False))
        out.append(tokens)
    return out


def iob1(sentence) -> list[str]:
    tags, previous = [], None
    for _, kind, start in sentence:
        if kind is None:
            tags.append("O")
        else:
            tags.append(f"B-{kind}" if start and previous == kind else f"I-{kind}")
        previous = kind
    return tags


def iob2(sentence) -> list[str]:
    return ["O" if kind is None else f"{'B' if start else 'I'}-{kind}" for _, kind, start in sentence]


def entity_counts(sents) -> dict:
    counts = Counter(kind for s in sents for _, kind, start in s if start)
    return {"sentences": len(sents), "tokens": sum(map(len, sents)), "entities": dict(sorted(counts.items()))}


def write_conll03(root: Path, sizes=(40, 12, 12), seed: int = 0) -> dict:
    """eng.train/testa/testb: 4 columns, IOB1, documents opened by both -DOCSTART- forms; returns counts."""
    root.mkdir(parents=True, exist_ok=True)
    expected = {}
    for k, (split, name, n) in enumerate(zip(("train", "dev", "test"), ("eng.train", "eng.testa", "eng.testb"), sizes)):
        sents = sentences(n, seed + k)
        lines = []
        for i, sent in enumerate(sents):
            if i % 6 == 0:  # a document starts: alternate the two DOCSTART forms
                lines += ["-DOCSTART- -X- O O" if i % 12 == 0 else "-DOCSTART- -X- -X- O", ""]
            lines += [f"{w} NNP I-NP {t}" for (w, _, _), t in zip(sent, iob1(sent))]
            lines.append("")
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        expected[split] = entity_counts(sents)
    return expected


def write_wnut(root: Path, sizes=(20, 8, 8), seed: int = 10) -> dict:
    """WNUT-2017 layout: tab-separated IOB2; sentences end with an empty line or a line holding a tab."""
    root.mkdir(parents=True, exist_ok=True)
    expected = {}
    names = ("wnut17train.conll", "emerging.dev.conll", "emerging.test.annotated")
    for k, (split, name, n) in enumerate(zip(("train", "dev", "test"), names, sizes)):
        sents = sentences(n, seed + k)
        lines = []
        for i, sent in enumerate(sents):
            lines += [f"{w}\t{t}" for (w, _, _), t in zip(sent, iob2(sent))]
            lines.append("\t" if i % 2 else "")
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        expected[split] = entity_counts(sents)
    return expected


def write_vectors(path: Path, dim: int = 16, seed: int = 0) -> Path:
    """GloVe-style text vectors (no header): names of one type lie near each other, fillers elsewhere."""
    rng = random.Random(seed)
    centres = {kind: [rng.gauss(0, 1) for _ in range(dim)] for kind in [*NAMES, None]}
    lines = []
    for kind, words in [*NAMES.items(), (None, [*FILLER, "."])]:
        for word in words:
            vec = [c + rng.gauss(0, 0.3) for c in centres[kind]]
            lines.append(word.lower() + " " + " ".join(f"{v:.5f}" for v in vec))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
