"""Text to tag: checking an input before anything is written, and reading it as sentences that keep
character offsets into the input.

The layouts:

    raw (default)  running text, split into sentences and tokens by segtok through flair's
                   `SegtokSentenceSplitter`; a line break also ends a sentence, so headlines,
                   bylines and one-sentence-per-line text come out as they were written
    wrapped        raw text wrapped at a fixed width (`--no-line-breaks`): a single line break is a
                   space, and sentences end where segtok ends them (sentence-final punctuation or a
                   blank line)
    --tokenized    one sentence per line, tokens separated by whitespace; blank lines are skipped
    --tokenized --split-sentences
                   tokens separated by whitespace, several sentences to a line (WikiText-style
                   paragraphs): a sentence also ends after a token ".", "!" or "?"
    --columns      a CoNLL-style column file: the token is the first column, a blank line ends a
                   sentence, `-DOCSTART-` lines are document boundaries and never sentences

Each `TextSentence` holds its exact text, where that text starts in the input (in characters of
the decoded input, after a UTF-8 byte-order mark if there is one) and each token's (start, end) in
the text, so every output format can point back into the input. A line break is "\n" ("\r\n"
too: its "\r" is whitespace before it); a sentence after a blank line (raw, wrapped, tokenized) or
after `-DOCSTART-` (columns) starts a paragraph, which the HTML view keeps.

Memory stays bounded by the longest sentence, not the input: raw text is read and segmented in
blocks (`BLOCK_CHARS`), and a raw-text "sentence" with no sentence end in `MAX_SENTENCE_CHARS`
characters is cut at the last whitespace before that limit. A line of --tokenized input, or a
sentence of a column file, is held whole.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, TextIO

from nas.common.errors import InputError
from nas.common.files import UTF16_SNIFF, require_file, utf16_problem

LAYOUTS = ("raw", "wrapped", "tokenized", "tokenized-sentences", "columns")
SENTENCE_ENDS = frozenset({".", "!", "?"})  # tokens that end a sentence of tokenized-sentences input
ENCODING_ERRORS = ("strict", "replace")
DOCSTART = "-DOCSTART-"
CHECK_BYTES = 1 << 20  # bytes read at a time while checking an input
BLOCK_CHARS = 100_000  # raw text is segmented once at least this much is buffered
MAX_SENTENCE_CHARS = 1_000_000  # a raw sentence with no end in sight is cut at whitespace here
_TOKEN = re.compile(r"\S+")
_LINE_BREAK = re.compile("\n")
REPLACEMENT = "\ufffd"  # what --encoding-errors replace reads an undecodable byte as
_NEWLINE = b"\n"


@dataclass
class TextSentence:
    """One sentence of the input: `text` starts at character `offset` of the input (None for a column
    file, whose text is its tokens joined by spaces); `spans[i]` is token i's (start, end) in `text`;
    `words[i]` is what the model reads for token i (flair's normalised token, usually the same);
    `paragraph` is true when a blank line (or a document start) comes before the sentence."""

    text: str
    offset: int | None
    spans: list[tuple[int, int]]
    words: list[str]
    paragraph: bool = False

    @property
    def tokens(self) -> list[str]:
        return [self.text[start:end] for start, end in self.spans]


def check_text(chunks: Iterator[bytes], name: str, errors: str = "strict") -> None:
    """Refuse binary data (a NUL byte) and, with errors="strict", bytes that are not UTF-8.

    Runs over the whole input before any output is written, so a bad byte near the end of a large
    file never leaves half an output behind.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    position, line = 0, 1
    for chunk in chunks:
        nul = chunk.find(b"\0")
        if nul >= 0:
            utf16 = utf16_problem(chunk[:UTF16_SNIFF], name) if position == 0 else None
            if utf16:
                raise InputError(utf16)
            where = line + chunk.count(_NEWLINE, 0, nul)
            raise InputError(f"{name}: line {where}: a NUL byte (byte {position + nul}): a binary file, not text")
        if errors == "strict":
            pending = len(decoder.getstate()[0])  # bytes of a character begun in the previous chunk
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                at = max(0, err.start - pending)
                raise InputError(
                    f"{name}: line {line + chunk.count(_NEWLINE, 0, at)}: bytes that are not UTF-8 "
                    f"(byte {position + at}); --encoding-errors replace reads them as U+FFFD"
                ) from None
        line += chunk.count(_NEWLINE)
        position += len(chunk)
    if errors == "strict":
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InputError(
                f"{name}: line {line}: the file ends inside a UTF-8 character "
                f"(byte {position - len(decoder.getstate()[0])})"
            ) from None


def read_chunks(handle: BinaryIO, size: int = CHECK_BYTES) -> Iterator[bytes]:
    while chunk := handle.read(size):
        yield chunk


def check_file(path: Path, errors: str = "strict") -> None:
    """`check_text` on a file; a missing path or a directory is an InputError."""
    require_file(path)
    with open(path, "rb") as handle:
        check_text(read_chunks(handle), str(path), errors)


def open_text(path: Path, errors: str = "strict") -> TextIO:
    """The input decoded as UTF-8 (a leading byte-order mark skipped), line ends kept as they are so
    offsets count every character."""
    return open(path, encoding="utf-8-sig", errors=errors, newline="")


def sentences(handle: TextIO, layout: str = "raw") -> Iterator[TextSentence]:
    """The sentences of an input in order, for one of `LAYOUTS`."""
    if layout in ("raw", "wrapped"):
        return raw_sentences(handle, line_breaks=layout == "raw")
    if layout in ("tokenized", "tokenized-sentences"):
        return line_sentences(handle, split=layout == "tokenized-sentences")
    return column_sentences(handle)


def raw_sentences(handle: TextIO, line_breaks: bool = True) -> Iterator[TextSentence]:
    """Running text through flair's segtok splitter, a block at a time; with `line_breaks`, each line
    is split on its own, so a line break always ends a sentence.

    After each block the last sentence (found with segtok's own `split_multi`, which is cheap) is
    held back and read again with the text that follows it, so no sentence is cut at a block
    boundary; flair's splitter, which also tokenises, runs once on everything before it. The next
    block is at least as long as what is held back, which keeps the work linear in the input.
    """
    from flair.splitter import SegtokSentenceSplitter

    splitter = SegtokSentenceSplitter()
    buffer, base, end = "", 0, False
    breaks = 0  # line breaks since the end of the last sentence: two or more make a blank line
    while buffer or not end:
        if not end:
            piece = handle.read(max(BLOCK_CHARS, len(buffer)))
            end = not piece
            buffer += piece
        if buffer.isspace():
            base, buffer, breaks = base + len(buffer), "", breaks + buffer.count("\n")
            continue
        last = _last_sentence_start(buffer, line_breaks)
        if len(buffer) - last > MAX_SENTENCE_CHARS:  # a sentence with no end in sight: cut at whitespace
            space = max(buffer.rfind(c, last, last + MAX_SENTENCE_CHARS) for c in " \t\n\r")
            keep = space if space > last else last + MAX_SENTENCE_CHARS
        else:
            keep = len(buffer) if end else last
        block, position = buffer[:keep], 0
        for sentence in _split(block, base, splitter, line_breaks):
            start = sentence.offset - base
            sentence.paragraph = breaks + block.count("\n", position, start) >= 2
            position, breaks = start + len(sentence.text), 0
            yield sentence
        breaks += block.count("\n", position)
        base, buffer = base + keep, buffer[keep:]


def _split(block: str, base: int, splitter, line_breaks: bool) -> Iterator[TextSentence]:
    """The sentences of `block` (which starts at input offset `base`): of the whole block, or of each of its lines."""
    pieces = [(0, len(block))]
    if line_breaks:
        starts = [0] + [m.end() for m in _LINE_BREAK.finditer(block)]
        pieces = list(zip(starts, starts[1:] + [len(block)]))
    for start, stop in pieces:
        piece = block[start:stop]
        if piece.strip():  # segtok yields an empty sentence for trailing whitespace, which flair warns about
            yield from _from_flair(piece, base + start, splitter.split(piece.rstrip(), link_sentences=False))


def _last_sentence_start(text: str, line_breaks: bool) -> int:
    """Where the last sentence of `text` starts: segtok's last sentence (of the last line, with `line_breaks`)."""
    from segtok.segmenter import split_multi

    line = text.rfind("\n") + 1 if line_breaks else 0
    start = position = line
    for sentence in split_multi(text[line:]):
        if sentence:
            start = text.index(sentence, position)
            position = start + len(sentence)
    return start


def _from_flair(block: str, base: int, found: list) -> Iterator[TextSentence]:
    """TextSentences from the splitter's flair Sentences over `block` (which starts at input offset `base`).

    flair removes zero-width characters and maps C1 control characters to Windows-1252 before
    tokenising, so its token positions index that normalised text; they are mapped back to the
    block here.
    """
    for k, sentence in enumerate(found):
        if not len(sentence):
            continue
        start = sentence.start_position
        stop = found[k + 1].start_position if k + 1 < len(found) else len(block)
        where = _normalised_positions(block[start:stop])
        spans = [(where[t.start_position], where[t.end_position - 1] + 1) for t in sentence]
        text = block[start : start + spans[-1][1]]
        yield TextSentence(text, base + start, *_join_replacements(text, spans, [t.text for t in sentence]))


def _join_replacements(text: str, spans: list[tuple[int, int]], words: list[str]) -> tuple[list, list[str]]:
    """Spans and words with each U+FFFD kept inside the word it touches.

    segtok splits U+FFFD (what `--encoding-errors replace` reads an undecodable byte as) off as a
    symbol, so "caf\ufffd" would be `caf` and `\ufffd`. A token of replacement characters joins the
    word right before it, and a word right after a replacement character joins it, so the word
    stays one token.
    """
    joined_spans: list[tuple[int, int]] = []
    joined_words: list[str] = []
    for (start, end), word in zip(spans, words):
        if (
            joined_spans
            and joined_spans[-1][1] == start
            and (
                (text[start - 1].isalnum() and not text[start:end].strip(REPLACEMENT))
                or (text[start - 1] == REPLACEMENT and (text[start].isalnum() or text[start] == REPLACEMENT))
            )
        ):
            joined_spans[-1] = (joined_spans[-1][0], end)
            joined_words[-1] += word
        else:
            joined_spans.append((start, end))
            joined_words.append(word)
    return joined_spans, joined_words


def _normalised_positions(text: str) -> list[int] | range:
    """For each character of flair's normalisation of `text`, its position in `text`."""
    from flair.data import Sentence

    normalise = Sentence._handle_problem_characters  # flair's own rule: removes or replaces single characters
    if normalise(text) == text:
        return range(len(text))
    return [i for i, char in enumerate(text) if normalise(char)]


def line_sentences(handle: TextIO, split: bool = False) -> Iterator[TextSentence]:
    """One sentence per line, tokens separated by whitespace; with `split`, a sentence also ends after
    each of `SENTENCE_ENDS` (the first of a line's sentences starts the paragraph)."""
    offset, blank = 0, False
    for line in handle:
        matches = [(m.start(), m.end()) for m in _TOKEN.finditer(line)]
        for k, group in enumerate(_sentence_groups(line, matches) if split else [matches] if matches else []):
            first = group[0][0]
            spans = [(s - first, e - first) for s, e in group]
            text = line[first : group[-1][1]]
            yield TextSentence(text, offset + first, spans, [text[s:e] for s, e in spans], blank and k == 0)
        blank = not matches
        offset += len(line)


def _sentence_groups(line: str, matches: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    groups: list[list[tuple[int, int]]] = [[]]
    for start, end in matches:
        groups[-1].append((start, end))
        if line[start:end] in SENTENCE_ENDS:
            groups.append([])
    return [g for g in groups if g]


def check_columns(path: Path, name: str, errors: str = "strict") -> None:
    """A column file's `-DOCSTART-` lines stand between sentences: one inside a sentence would split it
    silently. Checked over the whole input before any output is written."""
    with open_text(path, errors) as handle:
        begun = 0  # the line the current sentence begins on
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                begun = 0
            elif fields[0] == DOCSTART and begun:
                raise InputError(
                    f"{name}: line {number}: {DOCSTART} inside a sentence (a document starts after a "
                    f"blank line; line {begun} begins this sentence)"
                )
            elif fields[0] != DOCSTART and not begun:
                begun = number


def column_sentences(handle: TextIO) -> Iterator[TextSentence]:
    """Sentences of a column file: first-column tokens joined by single spaces."""
    words: list[str] = []
    document = False
    for line in handle:
        fields = line.split()
        if fields and fields[0] != DOCSTART:
            words.append(fields[0])
            continue
        if words:
            yield _joined(words, document)
            words, document = [], False
        document = document or bool(fields)
    if words:
        yield _joined(words, document)


def _joined(words: list[str], document: bool) -> TextSentence:
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return TextSentence(" ".join(words), None, spans, list(words), document)
