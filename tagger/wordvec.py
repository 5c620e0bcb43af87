"""Word vectors trained offline with gensim, written as a GloVe-style text file (no header)."""
from __future__ import annotations

from pathlib import Path

from nas.errors import InputError
from nas.files import atomic_write_text, utf8_lines


def train_wordvec(corpus: str | Path, out: str | Path, dim: int = 100, method: str = "word2vec", epochs: int = 5,
                  window: int = 5, min_count: int = 1, seed: int = 1, workers: int = 1) -> dict:
    """Train word2vec or fastText on whitespace-tokenised lines; one worker keeps a seed reproducible."""
    from gensim.models import FastText, Word2Vec

    corpus = Path(corpus)
    if not corpus.is_file():
        raise InputError(f"{corpus}: no such file")
    sentences = [line.split() for _, line in utf8_lines(corpus) if line.strip()]
    if not sentences:
        raise InputError(f"{corpus}: empty corpus (no tokens)")
    cls = {"word2vec": Word2Vec, "fasttext": FastText}[method]
    model = cls(sentences=sentences, vector_size=dim, window=window, min_count=min_count, epochs=epochs,
                seed=seed, workers=workers)
    vectors = model.wv
    lines = (f"{word} " + " ".join(f"{x:.6f}" for x in vectors[word]) for word in vectors.index_to_key)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return {"words": len(vectors.index_to_key), "dim": dim, "sentences": len(sentences)}
