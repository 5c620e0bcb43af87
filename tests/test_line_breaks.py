"""Raw text: a line break ends a sentence (headlines, bylines, one sentence per line), --no-line-breaks
gives segtok's own splitting for wrapped text, and offsets stay exact either way."""

import io
import json
import random
import re

import pytest
from click.testing import CliRunner
from segtok.segmenter import split_multi

from tagger import text_input
from tagger.cli.tag import main as tag_main
from tagger.synthetic import generate

BYLINES = ["By Staff Reporters", "By Our Correspondent", "By Wire Staff"]
CITIES = ["LIMA", "OSLO", "ACCRA", "HANOI", "QUITO"]


def news(raw: str, seed: int = 0) -> tuple[list[list[str]], list[bool]]:
    """Articles made of raw.txt's paragraphs, as a news feed prints them: a headline (no final
    punctuation), a byline, a dateline before the first sentence, then one sentence per line with some
    lines holding two; a blank line between articles. Returns the sentences of each line ([] for a
    blank line) and, per sentence, whether a blank line comes before it."""
    rng = random.Random(seed)
    lines = []
    for k, text in enumerate(raw.strip().split("\n\n")):
        sentences = re.split(r"(?<=\.) ", text.strip())
        words = [w for w in sentences[0].split() if w.isalpha()]
        if k:
            lines.append([])
        lines += [
            [" ".join(w.capitalize() for w in words[:6])],
            [BYLINES[k % 3]],
            [f"{CITIES[k % 5]} (Wire) - {sentences[0]}"],
        ]
        body = sentences[1:]
        while body:
            take = 2 if len(body) > 1 and body[1][0].isupper() and rng.random() < 0.4 else 1
            lines.append(body[:take])
            body = body[take:]
    flags, blank = [], False
    for line in lines:
        for i, _ in enumerate(line):
            flags.append(blank and i == 0)
        blank = not line
    return lines, flags


@pytest.fixture(scope="module")
def articles(tmp_path_factory):
    raw = (
        generate(tmp_path_factory.mktemp("news"), seed=3, train=1, dev=1, test=1, lm_lines=10, raw_paragraphs=50)
        / "raw.txt"
    )
    return news(raw.read_text(encoding="utf-8"))


def write(path, lines, newline="\n", bom=False):
    text = newline.join(" ".join(line) for line in lines) + newline
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def read(path, layout):
    with text_input.open_text(path) as handle:
        return list(text_input.sentences(handle, layout))


def assert_offsets_exact(found, decoded):
    for s in found:
        assert decoded[s.offset : s.offset + len(s.text)] == s.text
        for (start, end), token in zip(s.spans, s.tokens):
            assert decoded[s.offset + start : s.offset + end] == token
    assert "".join(t for s in found for t in s.tokens) == "".join(decoded.split())


@pytest.mark.parametrize("newline,bom", [("\n", False), ("\r\n", True)])
def test_one_sentence_per_line_and_more_where_a_line_holds_several(articles, tmp_path, monkeypatch, newline, bom):
    lines, flags = articles
    path = write(tmp_path / "news.txt", lines, newline, bom)
    found = read(path, "raw")
    assert 280 <= sum(1 for line in lines if line) <= 330 and sum(len(line) > 1 for line in lines) >= 20
    assert [s.text for s in found] == [sentence for line in lines for sentence in line]
    assert [s.paragraph for s in found] == flags and sum(flags) == 49  # a blank line before each later article
    assert_offsets_exact(found, path.read_bytes().decode("utf-8-sig"))
    monkeypatch.setattr(text_input, "BLOCK_CHARS", 37)  # lines and sentences held back across tiny blocks
    assert read(path, "raw") == found


@pytest.mark.parametrize("newline,bom", [("\n", False), ("\r\n", True)])
def test_no_line_breaks_splits_as_segtok_does(articles, tmp_path, monkeypatch, newline, bom):
    lines, _ = articles
    path = write(tmp_path / "news.txt", lines, newline, bom)
    decoded = path.read_bytes().decode("utf-8-sig")
    found = read(path, "wrapped")
    assert [s.text for s in found] == [s for s in split_multi(decoded) if s.strip()]
    # headline, byline and dateline run into one sentence, as segtok alone reads them
    assert len(found) < 0.8 * sum(map(len, lines))
    assert sum(s.text.startswith(lines[0][0] + newline + BYLINES[0] + newline) for s in found) == 1
    assert_offsets_exact(found, decoded)
    monkeypatch.setattr(text_input, "BLOCK_CHARS", 37)
    assert read(path, "wrapped") == found


def test_tokenized_and_column_input_mark_paragraphs():
    lines = list(text_input.line_sentences(io.StringIO("a b\n\n \nc\nd\n")))
    assert [(s.text, s.paragraph) for s in lines] == [("a b", False), ("c", True), ("d", False)]
    columns = "-DOCSTART- -X- O O\n\nx NN O\n\ny NN O\n\n-DOCSTART- -X- O O\n\nz NN O\n"
    found = list(text_input.column_sentences(io.StringIO(columns)))
    assert [(s.text, s.paragraph) for s in found] == [("x", True), ("y", False), ("z", True)]


@pytest.mark.usefixtures("restore_flair_logging")
def test_bin_tag_offsets_round_trip_with_and_without_line_breaks(tiny_tagger, tmp_path):
    run, data = tiny_tagger
    lines, _ = news((data / "raw.txt").read_text(encoding="utf-8"))
    path = write(tmp_path / "news.txt", lines, "\r\n", bom=True)
    decoded = path.read_bytes().decode("utf-8-sig")
    counts = {}
    for extra in ([], ["--no-line-breaks"]):
        result = CliRunner().invoke(tag_main, ["--model", str(run), str(path), "--format", "jsonl", *extra])
        assert result.exit_code == 0, result.stderr
        records = [json.loads(line) for line in result.stdout.splitlines()]
        spans = [(r, span) for r in records for span in r["spans"]]
        assert len(spans) >= 20
        for r, span in spans:
            assert r["text"][span["start"] : span["end"]] == span["text"]
            assert decoded[r["offset"] + span["start"] : r["offset"] + span["end"]] == span["text"]
        counts[bool(extra)] = len(records)
    assert counts[False] == sum(map(len, lines)) > counts[True]


def test_no_line_breaks_is_for_raw_text_only(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a b\n", encoding="utf-8")
    result = CliRunner().invoke(tag_main, ["--model", str(tmp_path), str(path), "--tokenized", "--no-line-breaks"])
    assert result.exit_code == 2
    assert result.stderr == "error: --no-line-breaks is for raw text, not --tokenized or --columns\n"
