"""The word memory of flair's `PooledFlairEmbeddings`: part of the saved model, and bounded while predicting.

Pooled Flair embeddings (Akbik, Bergmann and Vollgraf, "Pooled Contextualized Embeddings for Named
Entity Recognition", NAACL 2019) remember, for every word they have seen, the pooled (min by
default) character-LM embedding of all its occurrences, and give each new occurrence that pooled
vector. flair wipes the memory whenever the model is put in training mode and fills it whenever
sentences are embedded, while predicting too; the model learns on pooled vectors.

**Saved with the model.** flair 0.15 saves neither the memory nor the embedding's name (`to_params`
leaves both out). A loaded model then starts from an empty memory, and, worse, its pooled
embeddings take flair's default names instead of the "I-name" their stack gave them; flair
concatenates a token's vectors in the sorted order of their names, so the loaded model reads its
input features in another order and scores far below what it scored before it was saved. Once
`teach_flair_the_memory` has run (on `import tagger`, which every loader here does), both are saved
in the embedding's parameters, the memory as a word list and two tensors (pooled vectors, float32,
and occurrence counts), never a pickle, and restored by every loader: this toolkit's and flair's own
`SequenceTagger.load`. A file without them (saved by flair itself, or by this toolkit before it
saved them) gets its names back (`repair_names`) and loads with `missing_memory` true;
`pool_memory` fills the memory again from the sentences it was trained on.

**Which memory.** flair fills the memory during a training's first epoch and its dev evaluation,
and keeps each token's pooled vector from then on (its default embedding storage); the memory
itself is wiped at the start of every later epoch and stays empty. So the memory a model is saved
with is the one it was trained and selected on: pooled over the training and dev sentences
(`pool_memory`, once per training, `holding` it while a model file is written), whichever epoch was
best. The test split then starts from it, as the dev split did in the first epoch.

**Bounded while predicting.** Tagging a large file would grow the memory without bound (one vector
of the LM's hidden size per distinct word and direction). `bound_pooled_memory` keeps every word of
the saved memory and at most `max_words` words met since, the most recently seen (least recently
seen first out). Below the bound, predictions equal flair's unbounded memory exactly. Tagging never
writes the model file.

flair and torch are imported when a function needs them, so the commands' `--help` does not load them.

As in flair, a sentence's vectors depend on the sentences embedded before it in the same process
(their words' occurrences are pooled): the run's own scoring and `bin/evaluate` tag a split in the
same order and batches, so they agree to the byte.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

DEFAULT_MAX_WORDS = 20_000
MEMORY, NAME = "memory", "name"  # keys of the saved memory and name in the embedding's parameters


class RecentWords(dict):
    """A dict that keeps every key of `kept` and the `capacity` most recently written other keys,
    in that order (kept first, then least recently written first).

    flair writes a word's entry in its two memory dicts (pooled vector, count) once per occurrence,
    always in the same order, so two of these with one capacity drop the same words.
    """

    def __init__(self, capacity: int, kept: dict | None = None):
        super().__init__(kept or {})
        self.capacity = capacity
        self.kept = frozenset(kept or ())
        self._recent: OrderedDict = OrderedDict()  # the other keys, least recently written first

    def __setitem__(self, key, value) -> None:
        if key in self.kept:
            super().__setitem__(key, value)
            return
        super().pop(key, None)  # written again: now the most recent
        super().__setitem__(key, value)
        self._recent[key] = None
        self._recent.move_to_end(key)
        if len(self._recent) > self.capacity:
            oldest, _ = self._recent.popitem(last=False)
            super().__delitem__(oldest)


def pooled_embeddings(model) -> list:
    """Every `PooledFlairEmbeddings` inside `model` (a tagger or embeddings)."""
    from flair.embeddings import PooledFlairEmbeddings

    return [module for module in model.modules() if isinstance(module, PooledFlairEmbeddings)]


def bound_pooled_memory(model, max_words: int = DEFAULT_MAX_WORDS) -> list:
    """Let every `PooledFlairEmbeddings` inside `model` keep its memory as it is now (the saved one,
    after loading) and at most `max_words` words more (0: no bound, flair's own); returns the
    embeddings found."""
    found = pooled_embeddings(model)
    for embedding in found:
        if max_words:
            embedding.word_embeddings = RecentWords(max_words, embedding.word_embeddings)
            embedding.word_count = RecentWords(max_words, embedding.word_count)
    return found


def memory_state(embedding) -> dict:
    """The memory of one `PooledFlairEmbeddings` as plain values: words, pooled vectors, counts."""
    import torch

    words = list(embedding.word_embeddings)
    width = embedding.context_embeddings.embedding_length
    vectors = (
        torch.stack([embedding.word_embeddings[w].detach().float().cpu() for w in words])
        if words
        else torch.zeros(0, width)
    )
    return {
        "words": words,
        "vectors": vectors,
        "counts": torch.tensor([embedding.word_count[w] for w in words], dtype=torch.long),
    }


def memory_problem(memory: Any) -> str | None:
    """What is wrong with a saved memory (None: nothing), as the rest of its field's name and the problem
    (".vectors': 2 values that are not finite"): distinct non-empty words, one finite vector each,
    counts of at least 1."""
    import torch

    if not isinstance(memory, dict):
        return f"': must be an object of words, vectors and counts, got {type(memory).__name__}"
    words, vectors, counts = memory.get("words"), memory.get("vectors"), memory.get("counts")
    if not isinstance(words, list):
        return f".words': must be a list of words, got {type(words).__name__}"
    for k, word in enumerate(words):
        if not isinstance(word, str) or not word:
            return f".words[{k}]': must be a word (a non-empty string), got {word!r}"
    if len(set(words)) < len(words):
        seen: set[str] = set()
        twice = next(w for w in words if w in seen or seen.add(w))
        return f".words': {twice!r} is there twice (each word has one pooled vector)"
    if not isinstance(vectors, torch.Tensor) or not vectors.is_floating_point() or vectors.dim() != 2:
        return ".vectors': must be a 2-D tensor of floats"
    if len(vectors) != len(words):
        return f".vectors': {len(vectors)} vectors for {len(words)} words"
    bad = (~torch.isfinite(vectors)).sum().item()
    if bad:
        return f".vectors': {bad} {'value that is' if bad == 1 else 'values that are'} not finite (NaN or inf)"
    if not isinstance(counts, torch.Tensor) or counts.is_floating_point() or counts.shape != (len(words),):
        return f".counts': must be {len(words)} integer counts, one per word"
    if len(counts) and counts.min().item() < 1:
        return f".counts': a count of {counts.min().item()} (a word in the memory occurred at least once)"
    return None


def restore_memory(embedding, state: dict) -> None:
    """Give `embedding` the memory `memory_state` read (checked: a damaged one is a ValueError)."""
    width = embedding.context_embeddings.embedding_length
    problem = memory_problem(state)
    if problem is None and state["vectors"].shape[1] != width:
        problem = f".vectors': {state['vectors'].shape[1]} wide, the embedding {width}"
    if problem:
        raise ValueError(f"damaged pooled-Flair memory: field 'memory{problem}")
    words, vectors, counts = state["words"], state["vectors"], state["counts"]
    embedding.word_embeddings = dict(zip(words, vectors.float()))
    embedding.word_count = dict(zip(words, counts.tolist()))
    embedding.missing_memory = False


def memory_bytes(model) -> int:
    """What the pooled memories of `model` take in its file (vectors and counts)."""
    return sum(
        len(e.word_embeddings) * (e.context_embeddings.embedding_length * 4 + 8) for e in pooled_embeddings(model)
    )


def missing_memory(model) -> bool:
    """True when a pooled embedding of `model` was loaded from a file that did not save its memory."""
    return any(getattr(e, "missing_memory", False) for e in pooled_embeddings(model))


def pool_memory(model, sentences: Iterable, batch_size: int = 64) -> list[tuple[dict, dict]]:
    """Pool the memory of every pooled embedding of `model` afresh over `sentences` (flair
    sentences: the training split, then dev) and leave it there; returns each embedding's
    (vectors, counts) dicts, in `pooled_embeddings` order.

    This is the memory flair builds in a training's first epoch and its dev evaluation: min and
    max pooling (and mean, to rounding) do not depend on the order of the occurrences; fade
    pooling does. The sentences' embeddings are cleared afterwards."""
    import torch

    found = pooled_embeddings(model)
    if not found:
        return []
    model.eval()
    for embedding in found:
        embedding.word_embeddings, embedding.word_count = {}, {}
    batch: list = []
    with torch.no_grad():
        for sentence in sentences:
            if len(sentence):
                batch.append(sentence)
            if len(batch) == batch_size:
                _embed(model, batch)
                batch = []
        if batch:
            _embed(model, batch)
    for embedding in found:
        embedding.missing_memory = False
    return [(e.word_embeddings, e.word_count) for e in found]


def _embed(model, batch: list) -> None:
    model.embeddings.embed(batch)
    for sentence in batch:
        sentence.clear_embeddings()


@contextmanager
def holding(model, memories: list[tuple[dict, dict]]) -> Iterator[None]:
    """`model`'s pooled embeddings hold `memories` (from `pool_memory`) inside the block, and their
    own memories again after it (a training saves its model so while flair's memory goes on)."""
    found = pooled_embeddings(model)
    own = [(e.word_embeddings, e.word_count) for e in found]
    for embedding, (vectors, counts) in zip(found, memories):
        embedding.word_embeddings, embedding.word_count = vectors, counts
    try:
        yield
    finally:
        for embedding, (vectors, counts) in zip(found, own):
            embedding.word_embeddings, embedding.word_count = vectors, counts


def repair_names(model) -> None:
    """Give the pooled embeddings of a file that did not save their names the names they had.

    flair 0.15's `to_params` leaves the name out too, and a `StackedEmbeddings` names its members
    "I-name" (this toolkit's stacks, re-stacked to keep fewer word vectors, "I-I-name"). Rebuilt,
    a pooled embedding takes its unprefixed default; flair concatenates a token's vectors in the
    sorted order of their names, so the model then reads its features in another order. The
    prefix is read off a sibling that saved its name (the word vectors), else taken as this
    toolkit's default stack (prefixed twice)."""
    from flair.embeddings import StackedEmbeddings

    for stack in (m for m in model.modules() if isinstance(m, StackedEmbeddings)):
        members = stack.embeddings
        broken = [i for i, e in enumerate(members) if getattr(e, "missing_name", False)]
        if not broken:
            continue
        times = next((_prefixes(e.name, i) for i, e in enumerate(members) if i not in broken), 2)
        for i in broken:
            members[i].name = f"{i}-" * times + members[i].context_embeddings.name + "-context"
            members[i].missing_name = False
        stack._StackedEmbeddings__names = [name for e in members for name in e.get_names()]


def _prefixes(name: str, index: int) -> int:
    prefix, times = f"{index}-", 0
    while name.startswith(prefix * (times + 1)):
        times += 1
    return times


def teach_flair_the_memory() -> None:
    """Make flair's `PooledFlairEmbeddings` save its name and memory in its parameters and restore
    them on loading.

    flair builds the embedding from `to_params()` on loading (`from_params`); without this
    toolkit, flair passes the extra keys on to the constructor, which ignores them, so such a file
    still loads in plain flair, with an empty memory and flair's default names. Called once, when
    `tagger.model` is imported.
    """
    from flair.embeddings import PooledFlairEmbeddings

    if getattr(PooledFlairEmbeddings.to_params, "saves_memory", False):
        return
    flair_to_params = PooledFlairEmbeddings.to_params
    flair_from_params = PooledFlairEmbeddings.__dict__["from_params"].__func__

    def to_params(self) -> dict:
        return {**flair_to_params(self), NAME: self.name, MEMORY: memory_state(self)}

    def from_params(cls, params: dict):
        name, memory = params.pop(NAME, None), params.pop(MEMORY, None)
        embedding = flair_from_params(cls, params)
        if name is None:
            embedding.missing_name = True
        else:
            embedding.name = name
        if memory is None:
            embedding.missing_memory = True
        else:
            restore_memory(embedding, memory)
        return embedding

    to_params.saves_memory = True
    PooledFlairEmbeddings.to_params = to_params
    PooledFlairEmbeddings.from_params = classmethod(from_params)
