"""Output formats of `bin/tag`, written one sentence at a time.

    conll   `token TAG` per line (IOB2 tags), a blank line after each sentence.
    jsonl   one JSON object per sentence:
            {"text": ..., "offset": ..., "tokens": [...],
             "spans": [{"start": 0, "end": 17, "text": "George Washington", "label": "PER", "score": 0.98}]}
            start/end are character offsets into "text" (text[start:end] == span text); "text" is
            the sentence exactly as in the input and "offset" where it starts there, so
            input[offset + start:offset + end] is the span too. Column-file input has no original
            text: "text" is its tokens joined by spaces and there is no "offset".
    inline  one sentence per line, tokens separated by single spaces, each entity bracketed with its
            label first, as in the CoNLL-2003 shared-task paper:
                [PER George Washington ] went to [LOC Washington ] .
            A token that would read as a bracket (`]`, or one starting with `[` or `\\`) is written
            with a `\\` in front.
    html    a self-contained page in the manner of spaCy's displaCy: the sentence text as in the
            input, each entity highlighted in its label's colour with the label after it
            (the score is the highlight's tooltip).

An input with no sentences gives an empty output in every format.
"""
from __future__ import annotations

import html
import json
import zlib
from typing import TextIO

from .prediction import Entity, entity_tags
from .text_input import TextSentence

FORMATS = ("conll", "jsonl", "inline", "html")
EXTENSIONS = {"conll": ".conll", "jsonl": ".jsonl", "inline": ".txt", "html": ".html"}
SCORE_DIGITS = 4


def conll(sentence: TextSentence, entities: list[Entity]) -> str:
    tags = entity_tags(len(sentence.spans), entities)
    return "".join(f"{token} {tag}\n" for token, tag in zip(sentence.tokens, tags)) + "\n"


def jsonl(sentence: TextSentence, entities: list[Entity]) -> str:
    record = {"text": sentence.text}
    if sentence.offset is not None:
        record["offset"] = sentence.offset
    record["tokens"] = sentence.tokens
    record["spans"] = [{"start": start, "end": end, "text": sentence.text[start:end], "label": e.label,
                        "score": round(e.score, SCORE_DIGITS)}
                       for e in entities for start, end in [_characters(sentence, e)]]
    return json.dumps(record, ensure_ascii=False) + "\n"


def inline(sentence: TextSentence, entities: list[Entity]) -> str:
    opens = {e.start: e.label for e in entities}
    closes = {e.end - 1 for e in entities}
    words = []
    for i, token in enumerate(sentence.tokens):
        if i in opens:
            words.append(f"[{opens[i]}")
        words.append("\\" + token if token == "]" or token[0] in "[\\" else token)
        if i in closes:
            words.append("]")
    return " ".join(words) + "\n"


HTML_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em; line-height: 2.5; }}
.sentence {{ white-space: pre-wrap; margin-bottom: 0.5em; }}
.entity {{ padding: 0.25em 0.4em; margin: 0 0.15em; border-radius: 0.35em; line-height: 1; }}
.label {{ font-size: 0.7em; font-weight: bold; text-transform: uppercase; margin-left: 0.5em; vertical-align: middle; }}
</style>
</head>
<body>
<h1>{title}</h1>
"""
HTML_TAIL = "</body>\n</html>\n"
# displaCy's colours for the CoNLL types; other labels take one of the rest by a hash of their name
COLOURS = {"PER": "#aa9cfc", "LOC": "#ff9561", "ORG": "#7aecec", "MISC": "#feca74"}
PALETTE = ["#bfeeb7", "#c887fb", "#e4e7d2", "#bfe1d9", "#ffeb80", "#f0d0ff", "#9cc9cc", "#ddd", "#ffa8a8", "#b5d8ff"]


def colour(label: str) -> str:
    return COLOURS.get(label) or PALETTE[zlib.crc32(label.encode("utf-8")) % len(PALETTE)]


def html_sentence(sentence: TextSentence, entities: list[Entity]) -> str:
    parts, position = [], 0
    for entity in entities:
        start, end = _characters(sentence, entity)
        parts.append(html.escape(sentence.text[position:start]))
        parts.append(f'<mark class="entity" style="background: {colour(entity.label)}" '
                     f'title="{entity.label} {entity.score:.{SCORE_DIGITS}f}">{html.escape(sentence.text[start:end])}'
                     f'<span class="label">{html.escape(entity.label)}</span></mark>')
        position = end
    parts.append(html.escape(sentence.text[position:]))
    return f'<div class="sentence">{"".join(parts)}</div>\n'


RENDER = {"conll": conll, "jsonl": jsonl, "inline": inline, "html": html_sentence}


class Writer:
    """Writes tagged sentences in one format to a text stream as they come; `close()` ends the page
    (html). Nothing at all is written for no sentences."""

    def __init__(self, fmt: str, out: TextIO, title: str = "tagged text"):
        self.fmt, self.out, self.title = fmt, out, title
        self.render = RENDER[fmt]
        self.started = False

    def write(self, sentence: TextSentence, entities: list[Entity]) -> None:
        if not self.started and self.fmt == "html":
            self.out.write(HTML_HEAD.format(title=html.escape(self.title)))
        self.started = True
        self.out.write(self.render(sentence, entities))

    def close(self) -> None:
        if self.started and self.fmt == "html":
            self.out.write(HTML_TAIL)


def _characters(sentence: TextSentence, entity: Entity) -> tuple[int, int]:
    return sentence.spans[entity.start][0], sentence.spans[entity.end - 1][1]
