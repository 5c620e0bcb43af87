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


def tiny_char_lm(path: Path, forward: bool) -> Path:
    """A small untrained flair character LM saved in flair's own file format."""
    import torch
    from flair.data import Dictionary
    from flair.models import LanguageModel

    chars = Dictionary()
    for ch in sorted(set("".join(w for words in NAMES.values() for w in words) + "".join(FILLER) + ". \n")):
        chars.add_item(ch)
    torch.manual_seed(0)
    LanguageModel(chars, is_forward_lm=forward, hidden_size=16, nlayers=1, embedding_size=8).save(path)
    return path


def label_vectors(iob2_file: Path, out: Path, dim: int = 16, seed: int = 0) -> Path:
    """GloVe-style vectors that give away each training word's most frequent entity type (one cluster per
    type), so that a tiny tagger learns tagger.synthetic's data in a few seconds."""
    kinds: dict[str, Counter] = {}
    for line in iob2_file.read_text(encoding="utf-8").splitlines():
        if line.strip():
            word, tag = line.split()
            kinds.setdefault(word, Counter())[tag[2:] if tag != "O" else "O"] += 1
    rng = random.Random(seed)
    centres = {kind: [rng.gauss(0, 1) for _ in range(dim)] for kind in ("O", "PER", "LOC", "ORG", "MISC")}
    lines = [
        word + " " + " ".join(f"{c + rng.gauss(0, 0.3):.4f}" for c in centres[counts.most_common(1)[0][0]])
        for word, counts in sorted(kinds.items())
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def train_tiny_tagger(root: Path) -> tuple[Path, Path]:
    """A DARTS_V2 tagger (hidden 16) trained for 3 epochs on tagger.synthetic data: (run directory, data directory)."""
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.synthetic import generate
    from tagger.train import train_runs

    data = generate(root / "data", seed=0, train=200, dev=40, test=40, lm_lines=300, raw_paragraphs=30)
    vectors = label_vectors(data / "iob2" / "train.txt", root / "vectors.txt")
    config = TaggerConfig(
        cell="darts_v2",
        corpus="conll03",
        data=str(data / "conll03"),
        embeddings=f"glove:{vectors}",
        hidden_size=16,
        batch_size=8,
        max_epochs=3,
        lr=0.5,
        seed=1,
    )
    train_runs(
        config,
        load_corpus("conll03", data / "conll03"),
        build_embeddings(config.embeddings),
        load("darts_v2"),
        root / "run",
    )
    return root / "run", data
