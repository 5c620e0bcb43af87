"""flair's pooled Flair embeddings, pooled a batch at a time.

`PooledFlairEmbeddings` (Akbik, Bergmann and Vollgraf, "Pooled Contextualized Embeddings for Named
Entity Recognition", NAACL 2019) remembers, for every word it has seen, the pool (min by default)
of the character-LM embeddings of all its occurrences, and gives each token its word's pool beside
its own embedding. flair updates the pools one occurrence at a time, a Python loop with a
`torch.min` per token: in a pooled tagger's first epoch and in every prediction, much of what the
embedding costs once the LM states come from a table (`tagger.charlm_states`).

`BatchPooling` pools all of a batch's occurrences of a word at once. It does so for the pools that
do not depend on the order of the occurrences (`min`, `max`), and leaves the memory as flair's loop
leaves it: the same pools and counts, its words in the same order (a bounded memory,
`tagger.pooled_memory`, drops the least recently written), and every token the same embedding.
`mean` and `fade` (sums in order) run flair's loop, and so does a batch whose new words could
make a bounded memory drop a word part-way through it.
"""
from __future__ import annotations

import torch

REDUCE = {"min": ("amin", torch.minimum), "max": ("amax", torch.maximum)}


class BatchPooling:
    """Installed as a `PooledFlairEmbeddings`' `_add_embeddings_internal` (`pool_by_batch`)."""

    def __init__(self, embedding):
        self.embedding = embedding

    def flair_pooling(self, sentences: list) -> list:
        """flair's own loop (the class's method: the instance's attribute is this object)."""
        return type(self.embedding)._add_embeddings_internal(self.embedding, sentences)

    def __call__(self, sentences: list) -> list:
        pooled = self.embedding
        if pooled.pooling not in REDUCE:
            return self.flair_pooling(sentences)
        tokens = [token for sentence in sentences for token in sentence.tokens]
        words: dict[str, int] = {}  # the batch's pooled words, numbered in order of first occurrence
        word_of, rows = [], []  # per occurrence: its word's number and its token's position
        for i, token in enumerate(tokens):
            text = token.text
            if text and (text[0].isupper() or not pooled.only_capitalized):  # flair's rule
                word_of.append(words.setdefault(text, len(words)))
                rows.append(i)
        memory, counts = pooled.word_embeddings, pooled.word_count
        capacity = getattr(memory, "capacity", None)
        if capacity is not None and len(memory) + sum(w not in memory for w in words) > capacity:
            return self.flair_pooling(sentences)
        pooled.context_embeddings.embed(sentences)
        name = pooled.context_embeddings.name
        if rows:
            self._pool([tokens[i]._embeddings[name].cpu() for i in rows], word_of, list(words), memory, counts)
        for token in tokens:
            text = token.text
            token.set_embedding(pooled.name, memory[text] if text in memory else token._embeddings[name])
        return sentences

    def _pool(self, local: list[torch.Tensor], word_of: list[int], texts: list[str], memory, counts) -> None:
        """Each word's pool over its occurrences (and its pool so far), written in the order of each
        word's last occurrence, as flair's one write per occurrence leaves them."""
        reduce, combine = REDUCE[self.embedding.pooling]
        local = torch.stack(local)
        index = torch.tensor(word_of)
        pools = local.new_empty(len(texts), local.size(1))
        pools.scatter_reduce_(0, index.unsqueeze(1).expand_as(local), local, reduce, include_self=False)
        seen = [w for w, text in enumerate(texts) if text in memory]
        if seen:
            pools[seen] = combine(torch.stack([memory[texts[w]] for w in seen]), pools[seen])
        occurrences = torch.bincount(index, minlength=len(texts)).tolist()
        last = {w: position for position, w in enumerate(word_of)}
        for w in sorted(last, key=last.get):
            memory[texts[w]] = pools[w].clone()  # its own tensor, as flair's: a bounded memory frees what it drops
            counts[texts[w]] = counts.get(texts[w], 0) + occurrences[w]


def pool_by_batch(module) -> list:
    """Give every `PooledFlairEmbeddings` inside `module` (a tagger or its embeddings) `BatchPooling`;
    returns the embeddings found."""
    from flair.embeddings import PooledFlairEmbeddings

    found = [m for m in module.modules() if isinstance(m, PooledFlairEmbeddings)]
    for embedding in found:
        if not isinstance(embedding.__dict__.get("_add_embeddings_internal"), BatchPooling):
            embedding._add_embeddings_internal = BatchPooling(embedding)
    return found
