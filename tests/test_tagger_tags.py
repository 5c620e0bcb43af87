"""IOB1 -> IOB2 -> BIOES conversion, table-driven, and the scheme check of each tag."""

import pytest

from tagger.tag_schemes import check_tag, from_spans, iob2_to_bioes, spans, to_iob2

# (input tags, IOB2, BIOES)
TABLE = [
    # IOB1: an entity starts with I-; B- only separates two adjacent entities of one type
    ("I-PER I-PER O I-LOC", "B-PER I-PER O B-LOC", "B-PER E-PER O S-LOC"),
    ("I-PER B-PER I-PER", "B-PER B-PER I-PER", "S-PER B-PER E-PER"),
    ("I-PER I-LOC I-LOC", "B-PER B-LOC I-LOC", "S-PER B-LOC E-LOC"),
    ("I-ORG B-ORG B-ORG", "B-ORG B-ORG B-ORG", "S-ORG S-ORG S-ORG"),
    # IOB2 passes through unchanged
    ("B-NP I-NP B-VP O B-PP", "B-NP I-NP B-VP O B-PP", "B-NP E-NP S-VP O S-PP"),
    ("B-X I-X I-X I-X", "B-X I-X I-X I-X", "B-X I-X I-X E-X"),
    # IOBES in
    ("S-PER B-LOC I-LOC E-LOC S-LOC", "B-PER B-LOC I-LOC I-LOC B-LOC", "S-PER B-LOC I-LOC E-LOC S-LOC"),
    ("O O", "O O", "O O"),
    ("I-MISC", "B-MISC", "S-MISC"),
]


@pytest.mark.parametrize("given,iob2,bioes", TABLE)
def test_conversion_table(given, iob2, bioes):
    assert to_iob2(given.split()) == iob2.split()
    assert iob2_to_bioes(to_iob2(given.split())) == bioes.split()
    assert to_iob2(bioes.split()) == iob2.split()  # BIOES -> IOB2 is the inverse


def test_spans_round_trip():
    iob2 = "B-PER I-PER B-PER O B-LOC I-LOC".split()
    assert spans(iob2) == [(0, 2, "PER"), (2, 3, "PER"), (4, 6, "LOC")]
    assert from_spans(len(iob2), spans(iob2)) == iob2


@pytest.mark.parametrize(
    "tag,scheme,ok",
    [
        ("O", "iob1", True),
        ("B-PER", "iob1", True),
        ("I-PER", "iob2", True),
        ("S-PER", "iobes", True),
        ("E-PER", "iob1", False),
        ("S-PER", "iob2", False),
        ("PER", "iob2", False),
        ("B-", "iob2", False),
        ("NNP", "iob1", False),
        ("X-PER", "iobes", False),
    ],
)
def test_check_tag(tag, scheme, ok):
    problem = check_tag(tag, scheme)
    assert (problem is None) == ok
    if not ok:
        assert repr(tag) in problem and scheme.upper() in problem
