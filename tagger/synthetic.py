"""The embedded default data: a seeded grammar that writes a small news-like world to disk.

No external text: names, places and organisations are built from syllables drawn from the seed,
then dropped into sentence templates. Entities are ambiguous on purpose (a surname that is also
a town, an organisation named after a place), so a tagger must read the context, and the word
order is regular enough that a language model's perplexity falls quickly.

Writes, under OUT:
    lm/train.txt lm/valid.txt lm/test.txt           language-model text, one sentence per line
    conll03/eng.train eng.testa eng.testb           4 columns, IOB1 tags, -DOCSTART- lines (CoNLL-2003 form)
    iob2/train.txt dev.txt test.txt                 2 columns (token tag), IOB2 tags
    raw.txt                                         untokenised paragraphs to tag
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from nas.common.files import atomic_write_text

SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tor",
    "va",
    "sel",
    "dun",
    "bra",
    "ish",
    "mon",
    "el",
    "gar",
    "po",
    "zen",
    "ta",
    "ri",
    "wen",
    "hal",
    "cor",
    "fi",
    "nes",
    "ul",
    "ba",
    "dor",
    "ky",
    "sa",
    "lum",
    "ve",
    "os",
]

# (template, POS per literal token); {PER} {LOC} {ORG} {MISC} {NUM} {DAY} {ROLE} are filled in
TEMPLATES = [
    "{PER} visited {LOC} on {DAY} .",
    "{ORG} said on {DAY} that {PER} would lead its office in {LOC} .",
    "{PER} , a {MISC} {ROLE} , lives in {LOC} .",
    "Shares of {ORG} rose {NUM} percent in {LOC} trading .",
    "{LOC} beat {LOC} {NUM} - {NUM} in the {MISC} Cup on {DAY} .",
    "The {MISC} government in {LOC} named {PER} as its new {ROLE} .",
    "{PER} told reporters in {LOC} that {ORG} had cut {NUM} jobs .",
    "Police in {LOC} arrested {NUM} people after the {ORG} rally .",
    "{ORG} and {ORG} agreed to merge , {PER} said .",
    "On {DAY} , {PER} met {PER} at the {ORG} headquarters in {LOC} .",
    "The {ROLE} of {ORG} , {PER} , resigned on {DAY} .",
    "Talks between {LOC} {LOC} delegates ended without a deal .",
    "{PER} {PER} and {PER} signed the {MISC} accord .",
    "Rain delayed play in {LOC} , where {PER} scored {NUM} runs for {ORG} .",
    "{NUM} {MISC} tourists flew from {LOC} to {LOC} on {DAY} .",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ROLES = ["minister", "writer", "striker", "chairman", "spokesman", "coach", "director", "senator"]
POS = {
    ",": ",",
    ".": ".",
    "-": ":",
    "the": "DT",
    "The": "DT",
    "a": "DT",
    "of": "IN",
    "in": "IN",
    "on": "IN",
    "On": "IN",
    "at": "IN",
    "to": "TO",
    "from": "IN",
    "for": "IN",
    "after": "IN",
    "between": "IN",
    "without": "IN",
    "and": "CC",
    "that": "IN",
    "where": "WRB",
    "its": "PRP$",
    "would": "MD",
    "had": "VBD",
    "said": "VBD",
    "told": "VBD",
    "rose": "VBD",
    "beat": "VBD",
    "named": "VBD",
    "visited": "VBD",
    "lives": "VBZ",
    "cut": "VBD",
    "lead": "VB",
    "merge": "VB",
    "met": "VBD",
    "flew": "VBD",
    "scored": "VBD",
    "percent": "NN",
    "people": "NNS",
    "jobs": "NNS",
    "runs": "NNS",
    "Cup": "NNP",
}


@dataclass
class Token:
    text: str
    pos: str
    kind: str = "O"
    begins: bool = False


class World:
    """The names of one seed: people, places, organisations, nationalities."""

    def __init__(self, rng: random.Random):
        def word(parts: int) -> str:
            return "".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()

        self.first = [word(2) for _ in range(40)]
        self.last = [word(rng.choice([2, 3])) for _ in range(60)]
        self.places = [word(rng.choice([2, 3])) for _ in range(40)]
        # a few surnames double as towns: only the context tells PER from LOC
        self.places += self.last[:8]
        self.nations = [p + rng.choice(["ian", "ese", "ish"]) for p in self.places[:20]]
        org_tails = ["Corp", "Bank", "United", "Group", "Airways", "Holdings"]
        self.orgs = [[word(2), rng.choice(org_tails)] for _ in range(25)]
        self.orgs += [["Bank", "of", p] for p in self.places[:6]]  # an organisation named after a place
        self.rng = rng

    def entity(self, kind: str) -> list[tuple[str, str]]:
        """Tokens with their POS for one entity of `kind`."""
        r = self.rng
        if kind == "PER":
            names = [r.choice(self.first), r.choice(self.last)] if r.random() < 0.7 else [r.choice(self.last)]
        elif kind == "LOC":
            names = [r.choice(self.places)] if r.random() < 0.85 else ["New", r.choice(self.places)]
        elif kind == "ORG":
            names = list(r.choice(self.orgs))
        else:
            names = [r.choice(self.nations)]
        return [(n, "IN" if n == "of" else "NNP") for n in names]

    def sentence(self) -> list[Token]:
        """One sentence; each token knows its entity type and whether it starts an entity."""
        r = self.rng
        out: list[Token] = []
        for piece in r.choice(TEMPLATES).split():
            if piece in ("{PER}", "{LOC}", "{ORG}", "{MISC}"):
                kind = piece[1:-1]
                out += [Token(tok, pos, kind, k == 0) for k, (tok, pos) in enumerate(self.entity(kind))]
            elif piece == "{NUM}":
                out.append(Token(str(r.randint(2, 99)), "CD"))
            elif piece == "{DAY}":
                out.append(Token(r.choice(DAYS), "NNP"))
            elif piece == "{ROLE}":
                out.append(Token(r.choice(ROLES), "NN"))
            else:
                out.append(Token(piece, POS.get(piece, "VBD" if piece.endswith("ed") else "NN")))
        return out


def tags(sentence: list[Token], scheme: str) -> list[str]:
    """IOB2: B- at every entity start. IOB1 (CoNLL-2003): B- only where an entity directly follows
    one of the same type, I- everywhere else."""
    out = []
    for k, tok in enumerate(sentence):
        if tok.kind == "O":
            out.append("O")
        elif scheme == "iob2":
            out.append(("B-" if tok.begins else "I-") + tok.kind)
        else:
            after_same = tok.begins and k > 0 and sentence[k - 1].kind == tok.kind
            out.append(("B-" if after_same else "I-") + tok.kind)
    return out


def detokenise(tokens: list[str]) -> str:
    text = ""
    for tok in tokens:
        text += tok if not text or tok in (",", ".") else " " + tok
    return text


def generate(
    out: str | Path,
    seed: int = 0,
    train: int = 1500,
    dev: int = 300,
    test: int = 300,
    lm_lines: int = 3000,
    raw_paragraphs: int = 40,
) -> Path:
    """Write the default data set for `seed` under `out` (byte-identical for the same seed)."""
    out = Path(out)
    world = World(random.Random(seed))
    lm = [" ".join(t.text for t in world.sentence()) for _ in range(lm_lines + 2 * (lm_lines // 10))]
    cut = lm_lines // 10
    for split, lines in (("train", lm[2 * cut :]), ("valid", lm[:cut]), ("test", lm[cut : 2 * cut])):
        atomic_write_text(out / "lm" / f"{split}.txt", "\n".join(lines) + "\n")
    for split, n, conll_name in (("train", train, "eng.train"), ("dev", dev, "eng.testa"), ("test", test, "eng.testb")):
        sentences = [world.sentence() for _ in range(n)]
        iob2 = "\n\n".join("\n".join(f"{t.text} {tag}" for t, tag in zip(s, tags(s, "iob2"))) for s in sentences)
        atomic_write_text(out / "iob2" / f"{split}.txt", iob2 + "\n")
        blocks, docstart = [], ["-DOCSTART- -X- O O", "-DOCSTART- -X- -X- O"]
        for k, s in enumerate(sentences):
            if k % 20 == 0:  # a document every 20 sentences, both DOCSTART forms as in the real files
                blocks.append(docstart[(k // 20) % 2])
            blocks.append(
                "\n".join(
                    f"{t.text} {t.pos} {'I-NP' if t.pos.startswith('NN') else 'O'} {tag}"
                    for t, tag in zip(s, tags(s, "iob1"))
                )
            )
        atomic_write_text(out / "conll03" / conll_name, "\n\n".join(blocks) + "\n")
    paragraphs = [
        " ".join(detokenise([t.text for t in world.sentence()]) for _ in range(world.rng.randint(2, 6)))
        for _ in range(raw_paragraphs)
    ]
    atomic_write_text(out / "raw.txt", "\n\n".join(paragraphs) + "\n")
    return out
