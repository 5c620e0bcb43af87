"""Pooled Flair pooled a batch at a time: the memory, counts and token embeddings of flair's own loop."""
from __future__ import annotations

import pytest
import torch

import tagger_data as td


def _pooled(lm, pooling: str, only_capitalized: bool, batched: bool):
    from flair.embeddings import FlairEmbeddings, PooledFlairEmbeddings

    from tagger.charlm import load_charlm
    from tagger.pooling import pool_by_batch

    pooled = PooledFlairEmbeddings(FlairEmbeddings(load_charlm(lm, has_decoder=False), name=str(lm)),
                                   pooling=pooling, only_capitalized=only_capitalized)
    if batched:
        assert pool_by_batch(pooled) == [pooled]
    pooled.eval()  # flair's train() returns None
    return pooled


def _batches():
    """Batches whose sentences repeat words within and across batches, capitalised or not."""
    from flair.data import Sentence

    words = "Anna met anna and Boris in Lima ; Lima met Anna , boris met Chen .".split()
    return [[Sentence(words[k:k + n]) for k, n in ((0, 7), (b, 9), (2 * b % 7, 6))] for b in range(1, 5)]


def _run(pooled, memory):
    pooled.word_embeddings, pooled.word_count = memory(), memory()
    out = []
    for batch in _batches():
        pooled.embed(batch)
        out.append([t.get_embedding([pooled.name]) for s in batch for t in s])
    return out, pooled


@pytest.mark.parametrize("pooling", ["min", "max"])
@pytest.mark.parametrize("only_capitalized", [False, True])
@pytest.mark.parametrize("bound", [None, 100, 3])  # flair's dict; a bound never reached; one reached (flair's loop then)
def test_batch_pooling_leaves_flairs_memory_and_embeddings(tmp_path, pooling, only_capitalized, bound):
    from tagger.pooled_memory import RecentWords

    lm = td.tiny_char_lm(tmp_path / "lm.pt", True)
    memory = dict if bound is None else (lambda: RecentWords(bound))
    theirs, flair = _run(_pooled(lm, pooling, only_capitalized, batched=False), memory)
    ours, batched = _run(_pooled(lm, pooling, only_capitalized, batched=True), memory)
    for a, b in zip(theirs, ours):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert batched.word_count == flair.word_count
    if bound is not None:  # a bounded memory's order decides what it drops next
        assert list(batched.word_embeddings) == list(flair.word_embeddings) == list(flair.word_count)
        assert list(batched.word_count) == list(flair.word_count)
    assert batched.word_embeddings.keys() == flair.word_embeddings.keys()
    assert all(torch.equal(batched.word_embeddings[w], flair.word_embeddings[w]) for w in flair.word_embeddings)
    if bound != 3:  # the batches pooled repeated words, and the capitalisation rule held
        assert ("anna" in flair.word_count) is not only_capitalized and flair.word_count["Anna"] > 2


def test_order_dependent_pools_and_a_filling_bound_run_flairs_loop(tmp_path, monkeypatch):
    from flair.embeddings import PooledFlairEmbeddings

    from tagger.pooled_memory import RecentWords

    calls = []
    flairs = PooledFlairEmbeddings._add_embeddings_internal
    monkeypatch.setattr(PooledFlairEmbeddings, "_add_embeddings_internal",
                        lambda self, sentences: calls.append(len(sentences)) or flairs(self, sentences))
    lm = td.tiny_char_lm(tmp_path / "lm.pt", True)
    _run(_pooled(lm, "min", False, batched=True), dict)
    assert calls == []
    _run(_pooled(lm, "mean", False, batched=True), dict)
    assert calls == [3] * 4
    calls.clear()
    _run(_pooled(lm, "min", False, batched=True), lambda: RecentWords(8))  # 9 words: the batch that adds the 9th
    assert 0 < len(calls) < 4
