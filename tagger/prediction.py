"""What a tagger predicts: entities in sentences, on one path for scoring (`evaluation`) and for
tagging text (`bin/tag`).

`predict_entities` runs flair's `SequenceTagger.predict` on flair sentences, one of flair's
batches at a time, and reads the spans it stores under `LABEL`; `predict_tags` turns them into IOB2
tags for scoring against gold tags.

`tag` streams: sentences in, (sentence, entities) out, in input order, a few batches at a time.
Nothing is collected: sentences are read as they are needed and handed on as soon as every part
of them is tagged, so memory is bounded by a window of `LOOKAHEAD` batches and the longest sentence,
whatever the input size. Each window goes to flair's `SequenceTagger.predict` (under
`torch.inference_mode`), which sorts it by length and tags it `batch_size` sentences at a time, as
it sorts a whole corpus: sentences of similar length share a batch, so the recurrent cell, which
runs to the longest sentence of its batch, wastes few steps on padding. flair clears the
embeddings after each batch (`embedding_storage_mode="none"`).

A sentence longer than `MAX_TOKENS` is tagged in consecutive pieces of at most `MAX_TOKENS`
tokens, each a sentence of its own to the model, and its entities are joined back into one
sentence in the output; an entity cannot cross a cut. 512 tokens is over six times the longest
sentence of CoNLL-2000 (78 tokens) or WNUT-2017 (41), so ordinary sentences are never cut, while
a 100,000-token line becomes 196 pieces, tagged `batch_size` at a time: a batch never holds more
than `batch_size` × 512 tokens.

flair and torch are imported when a prediction starts, so that `bin/tag --help`, which reads the
output formats that name `Entity`, answers without loading them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from .tag_schemes import from_spans
from .text_input import TextSentence

MAX_TOKENS = 512
LOOKAHEAD = 8
LABEL = "predicted"  # the label name flair stores the predictions under


@dataclass(frozen=True)
class Entity:
    """Tokens start..end-1 of a sentence form an entity of type `label`; `score` is flair's (the mean
    of the Viterbi path's token confidences)."""

    start: int
    end: int
    label: str
    score: float


def entity_tags(length: int, entities: list[Entity]) -> list[str]:
    """IOB2 tags of a sentence of `length` tokens holding `entities`."""
    return from_spans(length, [(e.start, e.end, e.label) for e in entities])


def predict_entities(model, sentences: list, batch_size: int) -> list[list[Entity]]:
    """The entities the model finds in each of a list of flair sentences (token indices of that sentence).

    flair's `predict` clears the embeddings of every sentence it was given after each of its batches,
    work that grows with the square of the list's length (on 1,000 sentences, 5% of a prediction).
    So it is given one batch at a time: the batches it would have formed (the non-empty sentences
    sorted longest first, `batch_size` at a time), with the sentences' context (their neighbours in
    the list, read by context-aware embeddings) set first on the list's own order, as flair sets it.
    The predictions are those of one call on the whole list.
    """
    from flair.data import Sentence

    model.eval()
    Sentence.set_context_for_sentences(sentences)
    ordered = sorted((sentence for sentence in sentences if len(sentence) > 0), key=len, reverse=True)
    for start in range(0, len(ordered), batch_size):
        model.predict(ordered[start : start + batch_size], mini_batch_size=batch_size, label_name=LABEL)
    found = []
    for sentence in sentences:
        entities = []
        for span in sentence.get_spans(LABEL):
            label = span.get_label(LABEL)
            entities.append(Entity(span[0].idx - 1, span[-1].idx, label.value, label.score))
        found.append(entities)
    return found


def predict_tags(model, sentences: list, batch_size: int = 64) -> list[list[str]]:
    """IOB2 tags the model predicts for flair sentences."""
    return [
        entity_tags(len(sentence), entities)
        for sentence, entities in zip(sentences, predict_entities(model, sentences, batch_size))
    ]


@dataclass
class _Pending:
    sentence: TextSentence
    parts_left: int
    entities: list[Entity] = field(default_factory=list)


def tag(model, sentences: Iterable[TextSentence], batch_size: int = 32) -> Iterator[tuple[TextSentence, list[Entity]]]:
    """Tag sentences `batch_size` pieces at a time; yields each sentence with its entities, in input order."""
    from flair.data import Sentence

    waiting: deque[_Pending] = deque()
    window: list[tuple[_Pending, int, Sentence]] = []  # pieces of up to LOOKAHEAD batches
    for sentence in sentences:
        if not sentence.words:
            continue
        starts = range(0, len(sentence.words), MAX_TOKENS)
        pending = _Pending(sentence, len(starts))
        waiting.append(pending)
        for start in starts:
            window.append((pending, start, Sentence(sentence.words[start : start + MAX_TOKENS])))
            if len(window) == batch_size * LOOKAHEAD:
                _predict(model, window, batch_size)
                window = []
                yield from _finished(waiting)
    if window:
        _predict(model, window, batch_size)
    yield from _finished(waiting)


def _predict(model, window: list, batch_size: int) -> None:
    import torch

    with torch.inference_mode():
        found = predict_entities(model, [piece for _, _, piece in window], batch_size)
    # the pieces of one sentence come in order, so its entities do too
    for (pending, start, _), entities in zip(window, found):
        pending.entities += [replace(e, start=start + e.start, end=start + e.end) for e in entities]
        pending.parts_left -= 1


def _finished(waiting: deque) -> Iterator[tuple[TextSentence, list[Entity]]]:
    while waiting and waiting[0].parts_left == 0:
        done = waiting.popleft()
        yield done.sentence, done.entities
