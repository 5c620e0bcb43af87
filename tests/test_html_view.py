"""The HTML view of bin/tag: paragraphs kept, titled with the file's name, a legend of the labels
found, and distinct colours for up to 12 labels."""

import itertools
import math
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from tagger.cli.tag import main as tag_main
from tagger.output_formats import PALETTE, Colours, Writer
from tagger.prediction import Entity
from tagger.text_input import TextSentence


class Page(HTMLParser):
    """The title, the legend's (label, colour) keys, and per paragraph its sentences' texts and
    highlights (label, colour)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.title, self.keys, self.paragraphs, self.marks = "", [], [], []
        self.open: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "meta":  # no end tag
            return
        attrs = dict(attrs)
        kind = attrs.get("class") or tag
        self.open.append(kind)
        colour = (attrs.get("style") or "").removeprefix("background: ")
        if kind == "paragraph":
            self.paragraphs.append([])
        elif kind == "sentence":
            self.paragraphs[-1].append("")
        elif kind == "entity":
            self.marks.append(["", colour])
        elif kind == "key":
            self.keys.append(["", colour])

    def handle_endtag(self, tag):
        self.open.pop()

    def handle_data(self, data):
        where = self.open[-1] if self.open else None
        if where == "title":
            self.title += data
        elif where == "key":
            self.keys[-1][0] += data
        elif where == "label":
            self.marks[-1][0] += data
        if "sentence" in self.open and where != "label":
            self.paragraphs[-1][-1] += data


@pytest.mark.usefixtures("restore_flair_logging")
def test_paragraphs_title_and_legend(tiny_tagger, tmp_path):
    run, data = tiny_tagger
    paragraphs = (data / "raw.txt").read_text(encoding="utf-8").strip().split("\n\n")[:6]
    lines = [p.replace(". ", ".\n", 1) for p in paragraphs]  # a line break inside each paragraph too
    path = tmp_path / "deep" / "dir" / "news.txt"
    path.parent.mkdir(parents=True)
    path.write_text("\n\n\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(tag_main, ["--model", str(run), str(path), "--format", "html"])
    assert result.exit_code == 0, result.stderr
    page = Page(result.stdout)
    assert page.title == "news.txt"
    assert len(page.paragraphs) == 6
    assert ["\n".join(sentences) for sentences in page.paragraphs] == [p.replace(". ", ".\n") for p in paragraphs]
    labels = [label for label, _ in page.marks]
    assert {"PER", "LOC", "ORG"} <= set(labels)
    assert [label for label, _ in page.keys] == list(dict.fromkeys(labels))  # every label found, in order of appearance
    assert all(dict(page.keys)[label] == colour for label, colour in page.marks)


def test_no_paragraph_breaks_without_blank_lines():
    out = []
    writer = Writer("html", type("Out", (), {"write": lambda self, text: out.append(text)})(), title="a & b")
    for k in range(3):
        writer.write(TextSentence(f"s{k}", 3 * k, [(0, 2)], [f"s{k}"], paragraph=k == 2), [Entity(0, 1, "X", 0.9)])
    writer.close()
    page = Page("".join(out))
    assert page.title == "a & b" and page.paragraphs == [["s0", "s1"], ["s2"]]
    assert page.keys == [["X", PALETTE[4]]]


def test_twelve_labels_get_twelve_distinct_colours_and_conll_types_keep_displacys():
    colours = Colours()
    labels = [f"L{k}" for k in range(8)] + ["MISC", "ORG", "LOC", "PER"]
    got = [colours(label) for label in labels]
    assert len(set(got)) == 12 and colours("L3") == got[3]  # stable once given
    assert got[8:] == ["#feca74", "#7aecec", "#ff9561", "#aa9cfc"]  # displaCy's MISC, ORG, LOC, PER
    other = Colours()
    assert len({other(f"T{k}") for k in range(12)}) == 12  # none of them a CoNLL type
    assert [Colours()(label) for label in ("PER", "LOC")] == ["#aa9cfc", "#ff9561"]


def _lab(colour: str) -> tuple[float, float, float]:
    """sRGB hex → CIELAB (D65), from the CIE formulas."""
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_the_palette_colours_are_far_apart_and_light():
    labs = [_lab(c) for c in PALETTE]
    assert len(PALETTE) == 12
    assert min(math.dist(a, b) for a, b in itertools.combinations(labs, 2)) > 26
    assert min(lightness for lightness, _, _ in labs) > 55  # dark text stays readable on every colour
