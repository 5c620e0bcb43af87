"""Span tag schemes: IOB1, IOB2 (BIO) and IOBES (BIOES), and conversion between them.

Corpora arrive in IOB1 (CoNLL-2003), IOB2 (WNUT-2017, CoNLL-2000) or IOBES. Everything is
normalised to IOB2 on reading: evaluation always scores IOB2 spans (seqeval in strict IOB2 mode
silently drops entities of IOB1 input), and spans are what flair trains from, in the
scheme given by `--train-scheme` (BIOES by default).
"""

from __future__ import annotations

SCHEMES = ("iob1", "iob2", "iobes")
_PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "iobes": ("B", "I", "E", "S")}


def check_tag(tag: str, scheme: str) -> str | None:
    """None when `tag` belongs to `scheme`, else the problem in words."""
    if tag == "O":
        return None
    prefixes = _PREFIXES[scheme]
    prefix, dash, kind = tag.partition("-")
    if dash and prefix in prefixes and kind:
        return None
    allowed = ", ".join(f"{p}-TYPE" for p in prefixes)
    return f"tag {tag!r} is not {scheme.upper()} (expected O, {allowed})"


def order_problem(previous: str, tag: str, scheme: str) -> str | None:
    """IOBES only: None when `tag` may follow `previous` ("O" at a sentence's edges), else the problem.
    An IOBES entity opens with B- and closes with E-, or is one S-; IOB1 or IOB2 data breaks that
    (a lone I-, a B- that is not continued), so a file read with the wrong --tag-scheme is caught."""
    if scheme != "iobes":
        return None
    before, _, kind = previous.partition("-")
    prefix, _, this = tag.partition("-")
    opened = before in ("B", "I")
    if opened and not (prefix in ("I", "E") and this == kind):
        return (
            f"{previous} is not closed by I-{kind} or E-{kind} (got {tag if tag != 'O' else 'O or the sentence end'}): "
            "not IOBES; IOB1 or IOB2 data? (--tag-scheme)"
        )
    if not opened and prefix in ("I", "E"):
        return (
            f"{tag} after {previous}: not IOBES, where an entity opens with B- or S-; IOB1 or IOB2 data? (--tag-scheme)"
        )
    return None


def to_iob2(tags: list[str]) -> list[str]:
    """IOB1, IOB2 or IOBES tags -> IOB2.

    S-X/E-X become B-X/I-X; an I-X that does not continue an entity of type X (after O, after
    another type, or at the start) begins one: B-X. Valid IOB2 passes through unchanged, so IOB1
    and IOB2 input share this one rule.
    """
    out: list[str] = []
    previous = "O"
    for tag in tags:
        if tag == "O":
            out.append("O")
            previous = "O"
            continue
        prefix, _, kind = tag.partition("-")
        if prefix == "S":
            prefix = "B"
        elif prefix == "E":
            prefix = "I"
        if prefix == "I" and (
            previous == "O" or previous[2:] != kind or previous.startswith("E-") or previous.startswith("S-")
        ):
            prefix = "B"
        out.append(f"{prefix}-{kind}")
        previous = tag
    return out


def iob2_to_bioes(tags: list[str]) -> list[str]:
    """IOB2 -> BIOES: a one-token entity is S-X, the last token of a longer one E-X."""
    out: list[str] = []
    for i, tag in enumerate(tags):
        following = tags[i + 1] if i + 1 < len(tags) else "O"
        continues = following == f"I-{tag[2:]}"
        if tag.startswith("B-"):
            out.append(tag if continues else f"S-{tag[2:]}")
        elif tag.startswith("I-"):
            out.append(tag if continues else f"E-{tag[2:]}")
        else:
            out.append(tag)
    return out


def spans(iob2: list[str]) -> list[tuple[int, int, str]]:
    """(start, end exclusive, type) of each entity in IOB2 tags."""
    found: list[tuple[int, int, str]] = []
    start, kind = -1, ""
    for i, tag in enumerate([*iob2, "O"]):
        if start >= 0 and not (tag.startswith("I-") and tag[2:] == kind):
            found.append((start, i, kind))
            start = -1
        if tag.startswith("B-") or (tag.startswith("I-") and start < 0):
            start, kind = i, tag[2:]
    return found


def from_spans(length: int, entities: list[tuple[int, int, str]]) -> list[str]:
    """IOB2 tags of a sentence of `length` tokens holding the given (start, end, type) entities."""
    tags = ["O"] * length
    for start, end, kind in entities:
        tags[start] = f"B-{kind}"
        for i in range(start + 1, end):
            tags[i] = f"I-{kind}"
    return tags
