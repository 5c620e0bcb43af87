"""A spaCy pipeline component that runs a saved tagger: `nlp.add_pipe("nas_tagger", config={"model": PATH})`.

    import spacy
    import tagger.spacy_component  # registers the factory (an installed package registers it itself)

    nlp = spacy.blank("en")
    nlp.add_pipe("nas_tagger", config={"model": "runs/ner"})
    doc = nlp("George Washington went to Washington .")
    print([(ent.text, ent.label_) for ent in doc.ents])

The tagger tags spaCy's own tokens (whitespace tokens left out), one spaCy sentence at a time when
the pipeline sets sentence boundaries, else the whole Doc as one sentence. A named-entity tagger
(tag type `ner`) sets `doc.ents`; any other (chunks, ...) puts its spans in `doc.spans[TAG_TYPE]`;
`spans_key` puts them in `doc.spans[spans_key]` instead, whatever the task. Each span's score is
flair's, in `doc.spans` as the span group's `attrs["scores"]`. The model loads as every command loads
it (no pickled code runs); the component holds only its path, so `nlp.to_disk` saves the path, not
the model. spaCy is an optional extra: `pip install nas-tagger[spacy]`.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from spacy.language import Language
from spacy.tokens import Doc, Span

DEFAULTS = {"model": None, "batch_size": 32, "spans_key": None, "device": "cpu"}


class TaggerComponent:
    """Runs the tagger saved at `model` on each Doc (see the module's docstring)."""

    def __init__(self, name: str, model: str, batch_size: int, spans_key: str | None, device: str):
        from nas.common.errors import InputError

        from .model import load_for_prediction

        if not model:
            raise InputError(f'{name}: give the saved tagger, nlp.add_pipe("nas_tagger", config={{"model": PATH}})')
        self.name, self.batch_size, self.spans_key = name, batch_size, spans_key
        self.tagger = load_for_prediction(model, device)
        self.tag_type = self.tagger.tag_type

    def __call__(self, doc: Doc) -> Doc:
        return next(self.pipe([doc]))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        batch: list[Doc] = []
        for doc in docs:
            batch.append(doc)
            if len(batch) == (batch_size or self.batch_size):
                yield from self._tag(batch)
                batch = []
        yield from self._tag(batch)

    def _tag(self, docs: list[Doc]) -> list[Doc]:
        from flair.data import Sentence

        from .prediction import predict_entities

        pieces = []  # (doc index, the Doc's token index of each word) per flair sentence
        for k, doc in enumerate(docs):
            parts = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
            for part in parts:
                kept = [token.i for token in part if not token.is_space]
                if kept:
                    pieces.append((k, kept))
        sentences = [Sentence([docs[k][i].text for i in kept]) for k, kept in pieces]
        found: list[list[Span]] = [[] for _ in docs]
        scores: list[list[float]] = [[] for _ in docs]
        for (k, kept), entities in zip(pieces, predict_entities(self.tagger, sentences, self.batch_size)):
            for entity in entities:
                found[k].append(Span(docs[k], kept[entity.start], kept[entity.end - 1] + 1, label=entity.label))
                scores[k].append(entity.score)
        for doc, spans, score in zip(docs, found, scores):
            if self.spans_key is None and self.tag_type == "ner":
                doc.ents = spans
            else:
                key = self.spans_key or self.tag_type
                doc.spans[key] = spans
                doc.spans[key].attrs["scores"] = score
        return docs


@Language.factory("nas_tagger", default_config=DEFAULTS)
def make_component(
    nlp: Language, name: str, model: str | None, batch_size: int, spans_key: str | None, device: str
) -> TaggerComponent:
    """spaCy's factory of the component (registered under `nas_tagger`)."""
    return TaggerComponent(name, model or "", batch_size, spans_key, device)
