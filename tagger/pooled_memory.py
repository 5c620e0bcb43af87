"""A bound on the word memory of flair's `PooledFlairEmbeddings` while predicting.

Pooled Flair embeddings remember, for every word they have seen, the pooled (min by default)
character-LM embedding of all its occurrences, and give each new occurrence that pooled vector.
flair clears the memory when a model is put in training mode and never otherwise, so tagging a
large file grows it without bound (flair 0.15): one vector of the LM's hidden size per distinct
word and per direction (2048 floats, 8 KB, for flair's news LMs).

Policy: the memory keeps the `max_words` most recently seen words (least recently seen first out),
per pooled embedding. Frequent words keep their pooled vector for as long as they keep coming; a
word unseen for `max_words` distinct words starts afresh, as flair's memory does at every epoch.
While fewer than `max_words` distinct words have been seen the predictions equal flair's
unbounded memory exactly. Memory stays below `max_words` × hidden size × 4 bytes per direction
(20,000 words: 160 MB per direction for a 2048-wide LM, 20 MB for a 256-wide one).
"""
from __future__ import annotations

from collections import OrderedDict

DEFAULT_MAX_WORDS = 20_000


class RecentWords(OrderedDict):
    """A dict that keeps the `capacity` most recently written keys.

    flair writes a word's entry in its two memory dicts (pooled vector, count) once per occurrence,
    always in the same order, so two of these with one capacity drop the same words.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        super().__init__()

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        if len(self) > self.capacity:
            self.popitem(last=False)


def bound_pooled_memory(model, max_words: int = DEFAULT_MAX_WORDS) -> list:
    """Give every `PooledFlairEmbeddings` inside `model` a fresh, empty memory of at most `max_words`
    words (0: unbounded, flair's own); returns the embeddings found."""
    from flair.embeddings import PooledFlairEmbeddings

    found = [module for module in model.modules() if isinstance(module, PooledFlairEmbeddings)]
    for embedding in found:
        embedding.word_embeddings = RecentWords(max_words) if max_words else {}
        embedding.word_count = RecentWords(max_words) if max_words else {}
    return found
