"""Frozen character-LM states, computed once per sentence and reused by every epoch, seed and cell.

A flair `FlairEmbeddings` that is not fine-tuned gives each token the character LM's hidden state
after the token; for a given sentence those states never change. flair computes them per batch and,
with its default `embeddings_storage_mode="cpu"`, keeps them on the tokens as views into the whole
batch's state tensor (every character's state, padding included): most of a pooled-Flair tagger's
memory. Here each sentence's states are computed once, kept compactly (tokens × hidden, float32,
so the tagger sees the very values flair computes), and set on the tokens of each batch from the
table. `PooledFlairEmbeddings` reads them there and pools exactly as it would from flair's own.

A table can be saved to a folder (one file per character LM, named by a digest of its weights and
settings), so that the runs of a grid (`bin/transfer`) compute each corpus's states once. Such
files are loaded with torch's weights-only loader.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch

from nas.common.errors import InputError
from nas.common.files import atomic_torch_save, safe_torch_load

FORMAT, VERSION = "nas_charlm_states", 1
PREPASS_BATCH = 64  # sentences per batch of the pre-pass (sorted by length, so little padding)


def _key(sentence) -> str:
    """The sentence as a tokenized LM reads it, its token boundaries included."""
    return "\n".join(token.text for token in sentence.tokens)


class StateTable:
    """The states of one frozen `FlairEmbeddings`, one (tokens × hidden) tensor per sentence.

    Installed as the embedding's `_add_embeddings_internal`: sentences it knows are served from the
    table, the others computed by flair's own method and added."""

    def __init__(self, embedding):
        self.embedding = embedding
        self.compute = embedding._add_embeddings_internal  # flair's own, bound to the embedding
        self.digest = lm_digest(embedding)
        self.states: dict[str, torch.Tensor] = {}

    def __call__(self, sentences: list) -> list:
        sentences = [s for s in sentences if len(s)]
        keys = [_key(s) for s in sentences]
        missing = [s for s, k in zip(sentences, keys) if k not in self.states]
        if missing:
            self.add(missing)
        name = self.embedding.name
        for sentence, key in zip(sentences, keys):
            for token, state in zip(sentence.tokens, self.states[key]):
                token.set_embedding(name, state)
        return sentences

    def add(self, sentences: list) -> None:
        """Compute and keep the states of `sentences` (flair's own computation, in these batches)."""
        self.compute(sentences)
        name = self.embedding.name
        for sentence in sentences:
            self.states[_key(sentence)] = torch.stack([t.get_embedding([name]) for t in sentence.tokens]).cpu()
            sentence.clear_embeddings([name])

    def fill(self, sentences: Iterable) -> int:
        """Compute the states of every sentence not yet in the table, longest first in batches of
        `PREPASS_BATCH`; returns how many were computed."""
        todo = {_key(s): s for s in sentences if len(s) and _key(s) not in self.states}
        ordered = sorted(todo.values(), key=lambda s: len(s.to_tokenized_string()), reverse=True)
        with torch.no_grad():
            for start in range(0, len(ordered), PREPASS_BATCH):
                self.add(ordered[start : start + PREPASS_BATCH])
        return len(ordered)

    def file(self, folder: Path) -> Path:
        return folder / f"{self.digest}.pt"

    def save(self, folder: Path) -> None:
        keys = list(self.states)
        atomic_torch_save(
            self.file(folder),
            {
                "format": FORMAT,
                "version": VERSION,
                "lm": self.digest,
                "sentences": keys,
                "lengths": torch.tensor([len(self.states[k]) for k in keys], dtype=torch.long),
                "states": torch.cat([self.states[k] for k in keys]) if keys else torch.empty(0),
            },
        )

    def load(self, folder: Path) -> int:
        """Add the states saved in `folder` for this LM (none: 0); returns how many sentences."""
        path = self.file(folder)
        if not path.is_file():
            return 0
        data = safe_torch_load(path)
        if not (isinstance(data, dict) and data.get("format") == FORMAT and data.get("lm") == self.digest):
            raise InputError(f"{path}: not the character-LM states of this LM; delete it to recompute them")
        if data.get("version") != VERSION:
            raise InputError(
                f"{path}: character-LM states of format {data.get('version')!r}; this toolkit "
                f"reads format {VERSION}; delete the file to recompute them"
            )
        sentences, lengths, states = data.get("sentences"), data.get("lengths"), data.get("states")
        if not (
            isinstance(sentences, list)
            and isinstance(lengths, torch.Tensor)
            and isinstance(states, torch.Tensor)
            and len(sentences) == len(lengths)
            and int(lengths.sum()) == len(states)
        ):
            raise InputError(
                f"{path}: damaged character-LM states (sentences, lengths and states disagree); "
                "delete it to recompute them"
            )
        width = self.embedding.embedding_length
        if states.dim() != 2 or (len(states) and states.shape[1] != width) or states.is_complex():
            raise InputError(
                f"{path}: field 'states': shape {tuple(states.shape)}, but this LM's states are {width} wide; "
                "delete the file to recompute them"
            )
        if not bool(torch.isfinite(states).all()):
            raise InputError(f"{path}: field 'states': values that are not finite; delete the file to recompute them")
        rows = torch.split(states, lengths.tolist())
        self.states.update(zip(sentences, rows))
        return len(rows)


def lm_digest(embedding) -> str:
    """A digest of the LM's weights and of the settings that shape its token states."""
    digest = hashlib.sha256(repr((embedding.is_forward_lm, embedding.with_whitespace, embedding.is_lower)).encode())
    for name, tensor in sorted(embedding.lm.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:20]


@dataclass
class Reuse:
    """What one `reuse_states` call did: the tables, and the sentence states it computed and read."""

    tables: list[StateTable]
    computed: int = 0
    loaded: int = 0


def reuse_states(embeddings, sentences: list, folder: Path | None = None) -> Reuse:
    """Give every frozen, tokenized `FlairEmbeddings` inside `embeddings` a state table holding
    `sentences` (flair sentences: a corpus's train, dev and test), loaded from `folder` where saved
    there before, computed otherwise, and saved to `folder` when anything new was computed.

    A second call finds the tables of the first (another seed of the same embeddings) and adds only
    what they lack. No such embeddings: no tables, nothing changed."""
    from flair.embeddings import FlairEmbeddings

    reuse = Reuse([])
    for module in embeddings.modules():
        if not isinstance(module, FlairEmbeddings) or module.fine_tune or not module.tokenized_lm:
            continue
        table = module.__dict__.get("_add_embeddings_internal")
        if not isinstance(table, StateTable):
            table = StateTable(module)
            if folder is not None:
                reuse.loaded += table.load(folder)
        computed = table.fill(sentences)
        if computed and folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            table.save(folder)
        module._add_embeddings_internal = table
        reuse.tables.append(table)
        reuse.computed += computed
    return reuse
