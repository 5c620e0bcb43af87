"""Tagging corpora in column format: CoNLL-2003, WNUT-2017, CoNLL-2000 and any column file (formats: docs/data.md).

Every line is checked before anything is built, so bad input is one `InputError` naming the
file, the line and the problem: a column count other than the format's (or the file's first
line's, for --columns), mixed separators, an empty token, a `-DOCSTART-` inside a sentence, a tag
outside the scheme, bytes that are not UTF-8, an empty split. Tags are normalised to IOB2 on reading. An IOB2
file with I-X tags but no B-X gets a warning (in the corpus notes) naming the line of the first one.

`to_sentences` then builds flair `Sentence`s with one span label per entity. flair's
`ColumnDataset` is not used to read the files a second time: it keeps `-DOCSTART-` lines as
(boundary-marked) sentences, whereas here they are document boundaries and never sentences, and it
skips a tag column it cannot decode without a word (`except Exception: pass`). Documents are kept
as flair's sentence links, so context-using embeddings stop at a document boundary.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from nas.common.errors import InputError
from nas.common.files import require_file, utf8_lines

from . import tag_schemes
from .corpus_formats import FORMATS, SPLITS, Format

DOCSTART = "-DOCSTART-"
DEV_FRACTION = 0.1
MAX_COLUMNS = 64  # a line with more is not a column file (a paragraph of running text, a table dump)


@dataclass
class Split:
    """One file's sentences: tokens, IOB2 tags, and whether each sentence starts a document."""

    name: str
    path: Path
    tokens: list[list[str]]
    tags: list[list[str]]
    doc_starts: list[bool]

    def subset(self, indices: list[int], name: str) -> "Split":
        return Split(
            name,
            self.path,
            [self.tokens[i] for i in indices],
            [self.tags[i] for i in indices],
            [self.doc_starts[i] for i in indices],
        )

    def sample_out(self, count: int, seed: int, name: str) -> tuple["Split", "Split"]:
        """(a seeded sample of `count` sentences, named `name`; the other sentences), both in file order."""
        picked = set(random.Random(seed).sample(range(len(self.tokens)), count))
        return (
            self.subset(sorted(picked), name),
            self.subset([i for i in range(len(self.tokens)) if i not in picked], self.name),
        )

    def counts(self) -> dict:
        """Sentences, tokens and entities per type, as `--dry-run` prints them."""
        entities: Counter = Counter(kind for sent in self.tags for _, _, kind in tag_schemes.spans(sent))
        return {
            "sentences": len(self.tokens),
            "tokens": sum(map(len, self.tokens)),
            "entities": dict(sorted(entities.items())),
        }


@dataclass
class TaggingCorpus:
    train: Split
    dev: Split | None
    test: Split
    tag_type: str
    notes: list[str]

    def counts(self) -> dict:
        return {
            name: split.counts() if split is not None else None
            for name, split in (("train", self.train), ("dev", self.dev), ("test", self.test))
        }


def parse_columns(spec: str) -> dict[int, str]:
    """`0:text,3:ner` -> {0: "text", 3: "ner"}; one column must be `text`."""
    if not spec.strip():  # not the default columns: an empty value is a mistake, said here, not in the file
        raise InputError("--columns '': no columns given (INDEX:NAME items, e.g. 0:text,3:ner)")
    columns: dict[int, str] = {}
    for item in spec.split(","):
        index, colon, name = item.strip().partition(":")
        if not colon or not index.isdigit() or not name:
            raise InputError(f"--columns {spec}: each item is INDEX:NAME, e.g. 0:text,3:ner (got {item!r})")
        if int(index) in columns or name in columns.values():
            raise InputError(f"--columns {spec}: column {item!r} is given twice")
        columns[int(index)] = name
    if "text" not in columns.values():
        raise InputError(f"--columns {spec}: one column must be named text (the token)")
    return columns


def load_corpus(
    kind: str,
    data: str | Path,
    *,
    columns: dict[int, str] | None = None,
    tag_column: str | None = None,
    scheme: str | None = None,
    separator: str | None = None,
    seed: int = 1,
) -> TaggingCorpus:
    """Read and check the three splits of a corpus; a corpus without dev gets a seeded 10% of train."""
    root = Path(data)
    if not root.is_dir():
        raise InputError(f"{root}: no such directory (--data)")
    if kind == "column":
        fmt = Format(
            columns or {0: "text", 1: "ner"}, "", scheme or "iob2", separator or "auto", _find_column_files(root)
        )
    else:
        base = FORMATS[kind]
        fmt = Format(
            columns or base.columns, base.tag_column, scheme or base.scheme, separator or base.separator, base.files
        )
    tag_column = tag_column or fmt.tag_column or _only_tag_column(fmt.columns)
    names = {name: index for index, name in fmt.columns.items()}
    if tag_column not in names:
        raise InputError(f"--tag-column {tag_column}: not one of the columns ({', '.join(names)})")
    exact = len(fmt.columns) if kind != "column" and columns is None else None  # a known format's own columns
    reader = _Reader(fmt, names["text"], names[tag_column], exact)
    splits = {}
    for split in SPLITS:
        if split in fmt.files:
            path = root / fmt.files[split]
            require_file(path, f"{kind} {split} split")
            splits[split] = reader.read(path, split)
    notes = list(reader.warnings)
    if "dev" not in splits:
        train = splits["train"]
        if len(train.tokens) < 2:
            raise InputError(
                f"{train.path}: {len(train.tokens)} sentence in the train split, but {kind} has no dev "
                f"split and one is sampled from train ({DEV_FRACTION:.0%}), so train needs at least 2"
            )
        n_dev = max(1, round(DEV_FRACTION * len(train.tokens)))
        splits["dev"], splits["train"] = train.sample_out(n_dev, seed, "dev")
        notes.append(
            f"{kind}: no dev split in {root}; took {n_dev} of {len(train.tokens)} train sentences "
            f"({DEV_FRACTION:.0%}, seed {seed}) as dev"
        )
    return TaggingCorpus(splits["train"], splits["dev"], splits["test"], tag_column, notes)


def corpus_of(config) -> TaggingCorpus:
    """The corpus a tagger or tagging-search config names (its corpus, data, columns, tag column, scheme and
    seed): the one reading both runs share."""
    return load_corpus(
        config.corpus,
        config.data,
        columns=parse_columns(config.columns) if config.columns is not None else None,
        tag_column=config.tag_column,
        scheme=config.tag_scheme,
        seed=config.seed,
    )


def _only_tag_column(columns: dict[int, str]) -> str:
    others = [name for name in columns.values() if name != "text"]
    if len(others) != 1:
        raise InputError(f"--columns names {len(others)} tag columns ({', '.join(others)}): pick one with --tag-column")
    return others[0]


def _find_column_files(root: Path) -> dict[str, str]:
    """Split files found by flair's rule (a name holding train; dev or testa; testb, else test; .gz and
    .swp files skipped), except that two files for one split are refused, where flair takes one of them."""
    names = sorted(p.name for p in root.iterdir() if p.is_file() and not {".gz", ".swp"} & set(p.suffixes))
    candidates = {
        "train": [n for n in names if "train" in n and "54019" not in n],
        "dev": [n for n in names if "dev" in n or "testa" in n],
    }
    candidates["test"] = [n for n in names if "testb" in n] or [
        n for n in names if "test" in n and n not in candidates["dev"]
    ]
    found = {}
    for split, matches in candidates.items():
        if len(matches) > 1:
            raise InputError(
                f"{root}: {len(matches)} files for the {split} split ({', '.join(matches)}): "
                "keep one of them in the folder"
            )
        if matches:
            found[split] = matches[0]
    for split in ("train", "test"):
        if split not in found:
            raise InputError(f"{root}: no {split} file (a file whose name holds '{split}')")
    return found


class _Reader:
    """Checks every line of a column file and groups token lines into sentences."""

    def __init__(self, fmt: Format, text_index: int, tag_index: int, exact: int | None = None):
        self.fmt, self.text_index, self.tag_index, self.exact = fmt, text_index, tag_index, exact
        self.min_columns = max(fmt.columns) + 1
        self.warnings: list[str] = []

    def read(self, path: Path, split: str) -> Split:
        tokens: list[list[str]] = []
        tag_lists: list[list[str]] = []
        doc_starts: list[bool] = []
        sentence: list[str] = []
        sentence_tags: list[str] = []
        separator = self.fmt.separator
        width = None
        new_document = True
        begun: set[str] = set()  # IOB2: types some B- tag begins
        inside: dict[str, int] = {}  # IOB2: type -> line of its first I- tag
        number = 0
        for number, line in utf8_lines(path):
            if not line.strip():
                self._check_end(sentence_tags, path, number - 1)
                self._close(sentence, sentence_tags, tokens, tag_lists, doc_starts, new_document)
                new_document = new_document and not sentence
                sentence, sentence_tags = [], []
                continue
            if separator == "auto":
                separator = "tab" if "\t" in line else "space"
            fields = self._split(line, separator, path, number)
            if fields[0] == DOCSTART:  # a document boundary, never a sentence
                if sentence:
                    raise InputError(
                        f"{path}: line {number}: {DOCSTART} inside a sentence (a document starts after "
                        f"a blank line; line {number - len(sentence)} begins this sentence)"
                    )
                self._check_end(sentence_tags, path, number - 1)
                self._close(sentence, sentence_tags, tokens, tag_lists, doc_starts, new_document)
                sentence, sentence_tags, new_document = [], [], True
                continue
            width = self._check_columns(fields, width, path, number)
            tag = fields[self.tag_index]
            self._check_tag(tag, sentence_tags[-1] if sentence_tags else "O", path, number)
            if self.fmt.scheme == "iob2" and tag.startswith("B-"):
                begun.add(tag[2:])
            elif self.fmt.scheme == "iob2" and tag.startswith("I-"):
                inside.setdefault(tag[2:], number)
            sentence.append(fields[self.text_index])
            sentence_tags.append(fields[self.tag_index])
        self._check_end(sentence_tags, path, number)
        self._close(sentence, sentence_tags, tokens, tag_lists, doc_starts, new_document)
        if not tokens:
            raise InputError(f"{path}: no sentences (empty {split} split)")
        self._warn_of_entities_never_begun(inside, begun, path)
        return Split(split, path, tokens, tag_lists, doc_starts)

    def _check_columns(self, fields: list[str], width: int | None, path: Path, number: int) -> int:
        """A token line's columns: as many as the file's first line has (`width`, None on that line), as the
        format or --columns needs, and a token that is not empty; the file's width."""
        if len(fields) > MAX_COLUMNS:
            raise InputError(
                f"{path}: line {number}: {len(fields)} columns; a column file has at most "
                f"{MAX_COLUMNS} (one token and its tags per line)"
            )
        if width is None:
            width = len(fields)
            if self.exact is not None and width != self.exact:
                raise InputError(
                    f"{path}: line {number}: {width} columns, but this corpus format has "
                    f"{self.exact} ({' '.join(self.fmt.columns.values())}); read another layout "
                    "with --columns"
                )
            if width < self.min_columns:
                raise InputError(
                    f"{path}: line {number}: {width} columns, but --columns needs at least {self.min_columns}"
                )
        if len(fields) != width:
            raise InputError(f"{path}: line {number}: {len(fields)} columns where this file has {width}")
        if not fields[self.text_index].strip():
            raise InputError(f"{path}: line {number}: an empty token (column {self.text_index})")
        return width

    def _check_tag(self, tag: str, previous: str, path: Path, number: int) -> None:
        """A tag of the scheme, which may follow the sentence's tag before it (`previous`, O at its start)."""
        problem = tag_schemes.check_tag(tag, self.fmt.scheme) or tag_schemes.order_problem(
            previous, tag, self.fmt.scheme
        )
        if problem:
            raise InputError(f"{path}: line {number}: {problem}")

    def _warn_of_entities_never_begun(self, inside: dict[str, int], begun: set[str], path: Path) -> None:
        """In IOB2 every entity begins with B-: a type whose I- tags no B- begins is a typo, or IOB1 data."""
        for kind, number in inside.items():
            if kind not in begun:
                self.warnings.append(
                    f"warning: {path}: line {number}: I-{kind}, and no B-{kind} anywhere in the "
                    f"file: read as entities of a type {kind} of their own (a typo, or IOB1 data?)"
                )

    def _check_end(self, sentence_tags: list[str], path: Path, number: int) -> None:
        """A sentence ending at line `number` must not leave an IOBES entity open."""
        problem = sentence_tags and tag_schemes.order_problem(sentence_tags[-1], "O", self.fmt.scheme)
        if problem:
            raise InputError(f"{path}: line {number}: {problem}")

    @staticmethod
    def _split(line: str, separator: str, path: Path, number: int) -> list[str]:
        if separator == "tab":
            fields = line.rstrip("\t").split("\t")
            if len(fields) == 1 and " " in line.strip():
                raise InputError(f"{path}: line {number}: mixed separators (spaces in a tab-separated file)")
            return fields
        if "\t" in line and " " not in line.strip():
            raise InputError(
                f"{path}: line {number}: columns separated by tabs, but this corpus format separates "
                "them by spaces (read a tab-separated file with --corpus column)"
            )
        if "\t" in line:
            raise InputError(f"{path}: line {number}: mixed separators (a tab in a space-separated file)")
        return re.split(" +", line.strip(" "))

    @staticmethod
    def _close(sentence, sentence_tags, tokens, tag_lists, doc_starts, new_document) -> None:
        if sentence:
            tokens.append(sentence)
            tag_lists.append(tag_schemes.to_iob2(sentence_tags))
            doc_starts.append(new_document)


def to_sentences(split: Split, tag_type: str) -> list:
    """flair Sentences with one span label per entity; sentences link within a document only."""
    from flair.data import Sentence

    sentences = []
    previous = None
    for words, iob2, doc_start in zip(split.tokens, split.tags, split.doc_starts):
        sentence = Sentence(words)
        for start, end, kind in tag_schemes.spans(iob2):
            sentence[start:end].add_label(tag_type, kind)
        if previous is not None and not doc_start:
            sentence._previous_sentence = previous
            previous._next_sentence = sentence
        sentences.append(sentence)
        previous = sentence
    return sentences
