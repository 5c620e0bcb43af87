"""bin/tag: offsets into the input, the four formats, streaming, odd and bad input, and the pooled memory bound."""

import io
import json
import os
import pickle
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from tagger import prediction, text_input
from tagger.cli.tag import main

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.usefixtures("restore_flair_logging")


def run_tag(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def model(tiny_tagger):
    return tiny_tagger[0]


@pytest.fixture(scope="module")
def raw(tiny_tagger):
    return tiny_tagger[1] / "raw.txt"


# ---- parsers of each format, written from the format descriptions in tagger/output_formats.py ----


def parse_conll(out: str) -> list[tuple[list[str], list[tuple[int, int, str]]]]:
    from tagger.tag_schemes import spans

    sentences = []
    for block in out.split("\n\n"):
        if block.strip():
            rows = [line.split(" ") for line in block.strip("\n").split("\n")]
            sentences.append(([r[0] for r in rows], spans([r[1] for r in rows])))
    return sentences


def parse_inline(out: str) -> list[tuple[list[str], list[tuple[int, int, str]]]]:
    sentences = []
    for line in out.split("\n")[:-1]:
        tokens, found, label, start = [], [], None, 0
        for item in line.split(" "):
            if item == "]":
                found.append((start, len(tokens), label))
                label = None
            elif item.startswith("[") and len(item) > 1:
                label, start = item[1:], len(tokens)
            else:
                tokens.append(item[1:] if item.startswith("\\") else item)
        assert label is None, line
        sentences.append((tokens, found))
    return sentences


def parse_jsonl(out: str) -> list[dict]:
    return [json.loads(line) for line in out.split("\n") if line]


class _Page(HTMLParser):
    """Sentence texts and (start, end, label) character spans from the html page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sentences, self.where = [], []

    def handle_starttag(self, tag, attrs):
        classes = dict(attrs).get("class")
        if classes in ("sentence", "entity", "label"):
            self.where.append(classes)
        if classes == "sentence":
            self.sentences.append(["", []])
        elif classes == "entity":
            self.start, self.label = len(self.sentences[-1][0]), ""

    def handle_endtag(self, tag):
        if tag in ("div", "mark", "span") and self.where:
            closed = self.where.pop()
            if closed == "entity":
                self.sentences[-1][1].append((self.start, len(self.sentences[-1][0]), self.label))

    def handle_data(self, data):
        if self.where and self.where[-1] == "label":
            self.label += data
        elif self.where:
            self.sentences[-1][0] += data


def parse_html(out: str) -> list[tuple[str, list[tuple[int, int, str]]]]:
    page = _Page()
    page.feed(out)
    return [tuple(s) for s in page.sentences]


def char_spans(text: str, tokens: list[str], token_spans) -> list[tuple[int, int, str]]:
    """Token spans -> character spans in `text`, finding the tokens in order."""
    positions, at = [], 0
    for token in tokens:
        at = text.index(token, at)
        positions.append((at, at + len(token)))
        at += len(token)
    return [(positions[s][0], positions[e - 1][1], label) for s, e, label in token_spans]


# ---- reading the input ----

IRREGULAR = (
    "  George   Washington\twent to   New  York .\r\nZürich's café — “quoted”  …  (really?) \n\n"
    "Bank of Dor\u200bva  said: 42% Tokyo東京 , naïve\u00a0résumé!!  Emoji 🙂 here.   "
)


def test_raw_sentences_keep_offsets_into_the_input_with_any_block_size(tmp_path, monkeypatch):
    path = tmp_path / "in.txt"
    path.write_bytes(IRREGULAR.encode("utf-8"))
    with text_input.open_text(path) as handle:
        whole = list(text_input.sentences(handle))
    decoded = path.read_bytes().decode("utf-8")
    for s in whole:
        assert decoded[s.offset : s.offset + len(s.text)] == s.text
        for (start, end), token in zip(s.spans, s.tokens):
            assert decoded[s.offset + start : s.offset + end] == token and token.strip() == token
    # every non-space character of the input is in exactly one token, in order
    assert "".join(t for s in whole for t in s.tokens) == "".join(decoded.split())
    assert [(s.tokens[k], s.words[k]) for s in whole for k in range(len(s.spans)) if s.words[k] == "Dorva"] == [
        ("Dor\u200bva", "Dorva")
    ]  # flair drops U+200B from what the model reads; the offsets still index the input
    monkeypatch.setattr(text_input, "BLOCK_CHARS", 5)  # sentences held back across many tiny blocks
    with text_input.open_text(path) as handle:
        assert list(text_input.sentences(handle)) == whole


def test_a_raw_sentence_without_end_is_cut_at_whitespace(monkeypatch):
    monkeypatch.setattr(text_input, "BLOCK_CHARS", 16)
    monkeypatch.setattr(text_input, "MAX_SENTENCE_CHARS", 40)
    text = " ".join(f"word{i}" for i in range(60))
    found = list(text_input.raw_sentences(io.StringIO(text)))
    assert len(found) > 1 and all(len(s.text) <= 40 for s in found)
    assert [t for s in found for t in s.tokens] == text.split()
    assert all(text[s.offset : s.offset + len(s.text)] == s.text for s in found)


def test_tokenized_lines_and_column_files():
    lines = list(text_input.line_sentences(io.StringIO("  a  b\tc \r\n\n \nd e\n")))
    assert [(s.text, s.offset, s.tokens) for s in lines] == [("a  b\tc", 2, ["a", "b", "c"]), ("d e", 14, ["d", "e"])]
    columns = list(text_input.column_sentences(io.StringIO("-DOCSTART- -X- O O\n\nx NN O\ny NN O\n\n\nz NN O")))
    assert [(s.text, s.offset, s.tokens) for s in columns] == [("x y", None, ["x", "y"]), ("z", None, ["z"])]


def test_pre_tokenized_paragraphs_split_after_sentence_final_tokens(model, tmp_path):
    text = " = Valkyria = \n\n Senjo no Valkyria 3 : Unrecorded . It is the third game ! Why ?  Released in 2011 \n"
    found = list(text_input.line_sentences(io.StringIO(text), split=True))
    assert [s.tokens for s in found] == [
        ["=", "Valkyria", "="],
        ["Senjo", "no", "Valkyria", "3", ":", "Unrecorded", "."],
        ["It", "is", "the", "third", "game", "!"],
        ["Why", "?"],
        ["Released", "in", "2011"],
    ]
    assert all(text[s.offset : s.offset + len(s.text)] == s.text for s in found)  # offsets index the input
    assert [s.paragraph for s in found] == [False, True, False, False, False]
    assert len(list(text_input.line_sentences(io.StringIO(text)))) == 2  # without it: a sentence per line

    (tmp_path / "wiki.txt").write_text(text)
    result = run_tag("--model", model, "--tokenized", "--split-sentences", tmp_path / "wiki.txt", "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    assert [json.loads(line)["tokens"] for line in result.stdout.splitlines()] == [s.tokens for s in found]
    refused = run_tag("--model", model, "--split-sentences", tmp_path / "wiki.txt")
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --split-sentences splits --tokenized input")


# ---- formats ----


def test_jsonl_offsets_index_the_input(model, raw, tmp_path):
    # sentences the model knows, with irregular spacing, unicode and punctuation mixed in
    paragraphs = raw.read_text(encoding="utf-8").split("\n\n")[:8]
    noisy = "\r\n\n".join(
        "  " + p.replace(" ", "  \t", 3).replace(",", " ,«»", 1) + " — naïve café 🙂 ?!" for p in paragraphs
    )
    path = tmp_path / "noisy.txt"
    path.write_bytes(noisy.encode("utf-8"))
    result = run_tag("--model", model, path, "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    records = parse_jsonl(result.stdout)
    spans = [span for r in records for span in r["spans"]]
    assert len(spans) >= 20 and any(" " in span["text"] for span in spans)
    for r in records:
        assert noisy[r["offset"] : r["offset"] + len(r["text"])] == r["text"]
        for span in r["spans"]:
            assert r["text"][span["start"] : span["end"]] == span["text"]
            assert noisy[r["offset"] + span["start"] : r["offset"] + span["end"]] == span["text"]
            assert 0 < span["score"] <= 1
    assert "".join(t for r in records for t in r["tokens"]) == "".join(noisy.split())


def test_the_four_formats_parse_back_to_the_same_spans(model, raw):
    out = {}
    for fmt in ("conll", "jsonl", "inline", "html"):
        result = run_tag("--model", model, raw, "--format", fmt)
        assert result.exit_code == 0, result.stderr
        out[fmt] = result.stdout
    records = parse_jsonl(out["jsonl"])
    texts = [r["text"] for r in records]
    expected = [[(s["start"], s["end"], s["label"]) for s in r["spans"]] for r in records]
    assert sum(map(len, expected)) >= 30 and {label for e in expected for _, _, label in e} >= {"PER", "LOC", "ORG"}
    assert any(len(r["text"][s["start"] : s["end"]].split()) > 1 for r in records for s in r["spans"])
    html = parse_html(out["html"])
    assert [t for t, _ in html] == texts and [spans for _, spans in html] == expected
    for fmt in ("conll", "inline"):
        parsed = (parse_conll if fmt == "conll" else parse_inline)(out[fmt])
        assert [tokens for tokens, _ in parsed] == [r["tokens"] for r in records]
        assert [char_spans(text, tokens, spans) for text, (tokens, spans) in zip(texts, parsed)] == expected
    assert out["html"].startswith("<!DOCTYPE html>") and out["html"].endswith("</html>\n")


def test_inline_and_html_escape_what_would_read_as_markup(model, tmp_path):
    path = tmp_path / "markup.txt"
    path.write_text("<b>Dorva</b> & [PER] ] \\x said \"hi\" .\n", encoding="utf-8")
    inline = run_tag("--model", model, path, "--format", "inline", "--tokenized")
    assert inline.exit_code == 0, inline.stderr
    assert parse_inline(inline.stdout)[0][0] == ["<b>Dorva</b>", "&", "[PER]", "]", "\\x", "said", '"hi"', "."]
    page = run_tag("--model", model, path, "--format", "html", "--tokenized").stdout
    assert "<b>" not in page and parse_html(page)[0][0] == path.read_text(encoding="utf-8").strip()


# ---- streaming ----


def test_small_batches_give_the_output_of_one_big_batch(model, tmp_path):
    from tagger.synthetic import generate

    raw = generate(tmp_path / "more", seed=0, train=1, dev=1, test=1, lm_lines=10, raw_paragraphs=60) / "raw.txt"
    small, big = (run_tag("--model", model, raw, "--format", "jsonl", "--batch-size", n) for n in (3, 1000))
    assert small.exit_code == big.exit_code == 0
    a, b = parse_jsonl(small.stdout), parse_jsonl(big.stdout)
    assert len(a) > 150 and [(r["text"], r["offset"], r["tokens"]) for r in a] == [
        (r["text"], r["offset"], r["tokens"]) for r in b
    ]
    assert [[(s["start"], s["end"], s["label"]) for s in r["spans"]] for r in a] == [
        [(s["start"], s["end"], s["label"]) for s in r["spans"]] for r in b
    ]
    assert [s["score"] for r in a for s in r["spans"]] == pytest.approx(
        [s["score"] for r in b for s in r["spans"]], abs=1e-3
    )
    # input order: the tokens are the input's non-space characters, in order
    assert "".join(t for r in a for t in r["tokens"]) == "".join(raw.read_text(encoding="utf-8").split())
    offsets = [r["offset"] for r in a]
    assert offsets == sorted(offsets)


def test_a_line_of_100000_tokens_is_tagged_in_bounded_pieces(model, tmp_path, monkeypatch):
    from flair.models import SequenceTagger

    batches = []  # (sentences, longest) of every batch the model sees
    prepare = SequenceTagger._prepare_tensors

    def spy(self, sentences):
        batches.append((len(sentences), max(len(s) for s in sentences)))
        return prepare(self, sentences)

    monkeypatch.setattr(SequenceTagger, "_prepare_tensors", spy)
    words = ["Dorva", "visited", "Monday", "and", "the", "Bank", "of", "jobs", "said", "in"]
    path = tmp_path / "long.txt"
    path.write_text(" ".join(words[i % len(words)] for i in range(100_000)) + "\n", encoding="utf-8")
    result = run_tag("--model", model, path, "--batch-size", "64")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split("\n")
    assert len(lines) == 100_000 + 2 and lines[-2:] == ["", ""]  # one sentence, then its blank line
    assert [line.split(" ")[0] for line in lines[:20]] == (words * 2)
    assert sum(n for n, _ in batches) == 196 == -(-100_000 // prediction.MAX_TOKENS)
    assert max(n for n, _ in batches) == 64 and max(longest for _, longest in batches) == prediction.MAX_TOKENS == 512


def test_stdin_several_inputs_and_an_output_directory(model, raw, tmp_path):
    second = tmp_path / "second.txt"
    second.write_text("Dorva visited Baposa on Monday.\n", encoding="utf-8")
    alone = [run_tag("--model", model, path).stdout for path in (raw, second)]
    piped = run_tag("--model", model, "-", input=raw.read_bytes())
    assert piped.exit_code == 0 and piped.stdout == alone[0]
    both = run_tag("--model", model, raw, second, "--out", tmp_path / "out")
    assert both.exit_code == 0, both.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["raw.conll", "second.conll"]
    assert [(tmp_path / "out" / n).read_text(encoding="utf-8") for n in ("raw.conll", "second.conll")] == alone
    assert both.stdout == ""
    one_file = run_tag("--model", model, raw, "--format", "jsonl", "--out", tmp_path / "one.jsonl")
    assert (
        one_file.exit_code == 0 and one_file.stdout == "" and parse_jsonl((tmp_path / "one.jsonl").read_text("utf-8"))
    )


def test_columns_tag_the_first_column(model, tiny_tagger):
    testb = tiny_tagger[1] / "conll03" / "eng.testb"
    result = run_tag("--model", model, testb, "--columns", "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    blocks = [
        [line.split()[0] for line in block.splitlines() if not line.startswith("-DOCSTART-")]
        for block in testb.read_text(encoding="utf-8").split("\n\n")
    ]
    records = parse_jsonl(result.stdout)
    assert [r["tokens"] for r in records] == [b for b in blocks if b]
    assert all("offset" not in r and r["text"] == " ".join(r["tokens"]) for r in records)


@pytest.mark.parametrize("fmt", ["conll", "jsonl", "inline", "html"])
def test_empty_input_gives_empty_output(model, tmp_path, fmt):
    for content in ("", "  \n\n \t\n"):
        path = tmp_path / "empty.txt"
        path.write_text(content, encoding="utf-8")
        result = run_tag("--model", model, path, "--format", fmt)
        assert result.exit_code == 0 and result.stdout == ""
        written = run_tag("--model", model, path, "--format", fmt, "--out", tmp_path / f"empty.{fmt}")
        assert written.exit_code == 0 and (tmp_path / f"empty.{fmt}").read_bytes() == b""


# ---- bad input: one line, exit 2, nothing written ----


def assert_refused(result, message: str, out_dir: Path | None = None):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and message in result.stderr, (
        result.stderr
    )
    assert "Traceback" not in result.stderr and result.stdout == ""
    if out_dir is not None:
        assert [p.name for p in out_dir.iterdir()] == ["before.txt"], "half-written output left behind"


@pytest.fixture
def out_dir(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "before.txt").write_text("untouched")
    return out


def test_a_binary_file_is_refused(model, tmp_path, out_dir):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert_refused(
        run_tag("--model", model, path, "--out", out_dir / "x.conll"),
        f"error: {path}: line 3: a NUL byte (byte 8): a binary file, not text",
        out_dir,
    )


def test_text_that_is_not_utf8_is_refused_unless_replaced(model, raw, tmp_path, out_dir):
    path = tmp_path / "latin1.txt"
    good = raw.read_text(encoding="utf-8") * 3  # the bad byte comes long after the first batch
    path.write_bytes(good.encode("utf-8") + "Dorva visited Zürich .\n".encode("latin-1"))
    line = good.count("\n") + 1
    byte = len(good.encode("utf-8")) + len("Dorva visited Z")
    for out in (out_dir / "tagged.conll", out_dir / "before.txt"):
        assert_refused(
            run_tag("--model", model, path, "--out", out),
            f"error: {path}: line {line}: bytes that are not UTF-8 (byte {byte})",
            out_dir,
        )
    assert (out_dir / "before.txt").read_text() == "untouched"
    assert_refused(run_tag("--model", model, "-", input=path.read_bytes()), "error: stdin: line")
    replaced = run_tag("--model", model, path, "--format", "jsonl", "--encoding-errors", "replace")
    assert replaced.exit_code == 0, replaced.stderr
    last = parse_jsonl(replaced.stdout)[-1]
    assert last["text"] == "Dorva visited Z\ufffdrich ." and last["offset"] == len(good)


def test_a_replaced_byte_stays_inside_its_word(model, tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Un café à Zürich, naïve ; seul.\n".encode("latin-1"))  # each accent one bad byte
    result = run_tag("--model", model, path, "--format", "jsonl", "--encoding-errors", "replace")
    assert result.exit_code == 0, result.stderr
    (sentence,) = parse_jsonl(result.stdout)
    assert sentence["tokens"] == ["Un", "caf\ufffd", "\ufffd", "Z\ufffdrich", ",", "na\ufffdve", ";", "seul", "."]


def test_missing_inputs_and_models(model, raw, tmp_path, out_dir):
    assert_refused(
        run_tag("--model", model, tmp_path / "nope.txt", "--out", out_dir / "x"),
        f"error: {tmp_path / 'nope.txt'}: no such file",
        out_dir,
    )
    assert_refused(run_tag("--model", model, tmp_path), f"error: {tmp_path}: a folder, not a file")
    assert_refused(
        run_tag("--model", tmp_path / "none.pt", raw, "--out", out_dir / "x"),
        f"error: {tmp_path / 'none.pt'}: no such file",
        out_dir,
    )
    assert_refused(run_tag("--model", out_dir, raw), "no best-model.pt or final-model.pt in this directory")


def test_models_not_ours_or_corrupt_are_refused(model, raw, tmp_path, out_dir):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    assert_refused(
        run_tag("--model", tmp_path / "other.pt", raw, "--out", out_dir / "x"),
        "not a tagger model of this toolkit",
        out_dir,
    )
    good = (model / "best-model.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(good[: len(good) // 2])
    assert_refused(
        run_tag("--model", tmp_path / "cut.pt", raw, "--out", out_dir / "x"),
        "not a model file of this toolkit, or corrupt (truncated or damaged)",
        out_dir,
    )
    (tmp_path / "text.pt").write_text("hello\n")
    assert_refused(run_tag("--model", tmp_path / "text.pt", raw), "not a model file of this toolkit, or corrupt")


class _Payload:
    """Unpickling this would run `touch MARKER`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_never_runs(model, raw, tmp_path, out_dir):
    marker = tmp_path / "pwned"
    evil = {"format": "nas-tagger-model", "version": 1, "state": _Payload(marker)}
    torch.save(evil, tmp_path / "zip.pt")
    torch.save(evil, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "raw.pt").write_bytes(pickle.dumps(evil))
    pickle.loads(pickle.dumps(_Payload(tmp_path / "control")))  # the payload does work when unpickled
    assert (tmp_path / "control").exists()
    for name in ("zip.pt", "legacy.pt", "raw.pt"):
        result = run_tag("--model", tmp_path / name, raw, "--out", out_dir / "x")
        assert_refused(
            result,
            f"error: {tmp_path / name}: refused: its pickle names posix.system, code that loading it would run"
            if name == "zip.pt"  # the restricted unpickler names the global it refused
            else f"error: {tmp_path / name}: not a model file of this toolkit, or corrupt (refused by "
            f"the weights-only loader: ",
            out_dir,
        )
    assert "GLOBAL posix.system" in run_tag("--model", tmp_path / "legacy.pt", raw).stderr  # it says what it refused
    assert not marker.exists()


def test_the_launcher_streams_stdin_to_stdout_and_nothing_else(model, raw):
    """In a process of its own: flair's log (which it sends to stdout) must not reach stdout."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bin" / "tag"), "--model", str(model), "-", "--format", "jsonl"],
        input=raw.read_bytes(),
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == run_tag("--model", model, raw, "--format", "jsonl").stdout
    assert b"stdin: " in done.stderr and b"Traceback" not in done.stderr


def test_option_errors_are_one_line(model, raw):
    assert_refused(
        run_tag("--model", model, raw, "--tokenized", "--columns"), "--tokenized and --columns exclude each other"
    )
    assert_refused(run_tag("--model", model, raw, "--batch-size", "0"), "--batch-size: must be in [1, 65536]")
    assert_refused(run_tag("--model", model, "-", "-", input=b"x"), "stdin) can be read only once")


# ---- pooled Flair memory ----


def test_recent_words_keeps_the_most_recently_written():
    from tagger.pooled_memory import RecentWords

    memory = RecentWords(2)
    memory["a"], memory["b"] = 1, 2
    memory["a"] += 1  # a is now the most recent
    memory["c"] = 3
    assert list(memory.items()) == [("a", 2), ("c", 3)]


def test_pooled_memory_is_bounded_and_exact_below_the_bound(tmp_path):
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.pooled_memory import bound_pooled_memory, pooled_embeddings
    from tagger.train import build_model

    td.write_conll03(tmp_path / "data", sizes=(8, 4, 4))
    fwd, bwd = td.tiny_char_lm(tmp_path / "fwd.pt", True), td.tiny_char_lm(tmp_path / "bwd.pt", False)
    corpus = load_corpus("conll03", tmp_path / "data")
    torch.manual_seed(0)
    model = build_model(TaggerConfig(hidden_size=4), corpus, build_embeddings(f"pooled-flair:{fwd}:{bwd}"), None)
    model.eval()
    words = [
        f"{a}{b}" for a in "Anna Boris Chen Dara".split() for b in "lima oslo quito accra hanoi".split()
    ]  # 20 distinct
    text = "\n".join(" ".join(words[(i + k) % 20] for k in range(6)) + " ." for i in range(30))

    def tagged(max_words: int):  # from an empty memory each time (a model saved with none)
        for embedding in pooled_embeddings(model):
            embedding.word_embeddings, embedding.word_count = {}, {}
        pooled = bound_pooled_memory(model, max_words)
        out = [
            (s.tokens, e) for s, e in prediction.tag(model, text_input.line_sentences(io.StringIO(text)), batch_size=4)
        ]
        return out, pooled

    unbounded, pooled = tagged(0)
    assert len(pooled) == 2 and all(len(p.word_embeddings) == 21 for p in pooled)  # 20 words and "."
    same, _ = tagged(21)
    assert same == unbounded  # the bound changes nothing while every word fits
    _, pooled = tagged(5)
    recent = []  # the 5 distinct words seen last, most recent first
    for word in reversed(text.split()):
        recent += [word] if word not in recent and len(recent) < 5 else []
    for p in pooled:
        assert list(p.word_embeddings) == list(p.word_count) == recent[::-1]
