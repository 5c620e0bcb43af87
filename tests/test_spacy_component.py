"""The spaCy component: a blank English pipeline runs a saved tagger and sets `doc.ents` (or a span group),
read back with spaCy's own Doc API, against the tagger's own predictions on the same words."""

from __future__ import annotations

import pytest

spacy = pytest.importorskip("spacy")

pytestmark = pytest.mark.usefixtures("restore_flair_logging")


def _docs(vocab, data, n: int = 6) -> list:
    """Docs of pairs of test sentences, spaCy sentences marked, a whitespace token between the two."""
    from spacy.tokens import Doc

    blocks = (data / "conll03" / "eng.testb").read_text(encoding="utf-8").strip().split("\n\n")
    sentences = [[line.split()[0] for line in b.splitlines() if not line.startswith("-DOCSTART-")] for b in blocks]
    sentences = [s for s in sentences if s][: 2 * n]
    docs = []
    for first, second in zip(sentences[::2], sentences[1::2]):
        words = [*first, "\n", *second]
        starts = [True] + [False] * (len(first) - 1) + [False, True] + [False] * (len(second) - 1)
        docs.append(Doc(vocab, words=words, sent_starts=starts))
    return docs


def _expected(run, docs) -> list[list[tuple[int, int, str]]]:
    """(start, end, label) in Doc tokens of what the tagger finds in each spaCy sentence, tagged on its own."""
    from flair.data import Sentence

    from tagger.model import load_tagger
    from tagger.prediction import predict_entities

    model, found = load_tagger(run), []
    for doc in docs:
        spans = []
        for sent in doc.sents:
            kept = [t.i for t in sent if not t.is_space]
            (entities,) = predict_entities(model, [Sentence([doc[i].text for i in kept])], 8)
            spans += [(kept[e.start], kept[e.end - 1] + 1, e.label) for e in entities]
        found.append(spans)
    return found


def test_a_blank_english_pipeline_sets_the_taggers_entities(tiny_tagger):
    import tagger.spacy_component  # noqa: F401 - registers the factory

    run, data = tiny_tagger
    nlp = spacy.blank("en")
    nlp.add_pipe("nas_tagger", config={"model": str(run)})
    docs = [nlp(doc) for doc in _docs(nlp.vocab, data)]
    expected = _expected(run, docs)
    assert [[(e.start, e.end, e.label_) for e in doc.ents] for doc in docs] == expected
    assert sum(map(len, expected)) > 3 and {label for spans in expected for *_, label in spans} <= {
        "PER",
        "LOC",
        "ORG",
        "MISC",
    }
    assert all(" \n" not in ent.text and "\n" != ent.text for doc in docs for ent in doc.ents)
    # nlp.pipe in batches, the spans in a span group with flair's scores
    grouped = spacy.blank("en")
    grouped.add_pipe("nas_tagger", config={"model": str(run), "spans_key": "sc", "batch_size": 4})
    docs = list(grouped.pipe(_docs(grouped.vocab, data)))
    assert [[(s.start, s.end, s.label_) for s in doc.spans["sc"]] for doc in docs] == expected
    assert all(not doc.ents for doc in docs)
    assert all(0 < score <= 1 for doc in docs for score in doc.spans["sc"].attrs["scores"])


def test_a_missing_model_is_refused_naming_the_config():
    import tagger.spacy_component  # noqa: F401
    from nas.common.errors import InputError

    with pytest.raises(InputError, match='nas_tagger: give the saved tagger, nlp.add_pipe\\("nas_tagger"'):
        spacy.blank("en").add_pipe("nas_tagger")
