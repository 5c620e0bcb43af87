"""Frozen character-LM states computed once: the same states as flair's, the same training, files that round-trip."""

from __future__ import annotations

import pytest
import torch

import tagger_data as td
from nas.common.errors import InputError


def _flair(lm):
    from flair.embeddings import FlairEmbeddings

    from tagger.charlm import load_charlm

    return FlairEmbeddings(load_charlm(lm, has_decoder=False), name=str(lm))


def _sentences(n: int, seed: int):
    from flair.data import Sentence

    return [Sentence([w for w, _, _ in s]) for s in td.sentences(n, seed)]


def _states(embedding, sentences) -> list[torch.Tensor]:
    embedding.embed(sentences)
    return [torch.stack([t.get_embedding([embedding.name]) for t in s]) for s in sentences]


@pytest.mark.parametrize("forward", [True, False])
def test_table_gives_flairs_own_states_in_any_batch(tmp_path, forward):
    from tagger.charlm_states import _key, reuse_states

    lm = td.tiny_char_lm(tmp_path / "lm.pt", forward)
    corpus = _sentences(30, 0)
    reuse = reuse_states(cached := _flair(lm), corpus)
    (table,) = reuse.tables
    assert reuse.computed == len(table.states) == len({_key(s) for s in corpus}) and reuse.loaded == 0
    batch = _sentences(30, 0)[5:12]  # new Sentence objects, another batch than the pre-pass's
    assert all(torch.equal(a, b) for a, b in zip(_states(cached, batch), _states(_flair(lm), _sentences(30, 0)[5:12])))
    unseen = _sentences(3, 99)  # not in the table: computed, added, and flair's too
    assert all(torch.equal(a, b) for a, b in zip(_states(cached, unseen), _states(_flair(lm), _sentences(3, 99))))
    assert len(table.states) == len({_key(s) for s in corpus + _sentences(3, 99)})


def test_saved_states_are_read_back_not_recomputed(tmp_path):
    from tagger.charlm_states import reuse_states

    lm = td.tiny_char_lm(tmp_path / "lm.pt", True)
    (first,) = reuse_states(_flair(lm), _sentences(20, 0), tmp_path / "states").tables
    (file,) = (tmp_path / "states").glob("*.pt")
    reuse = reuse_states(again := _flair(lm), _sentences(20, 0), tmp_path / "states")
    (second,) = reuse.tables
    assert (reuse.loaded, reuse.computed) == (len(first.states), 0)
    assert first.states.keys() == second.states.keys()
    assert all(torch.equal(first.states[k], second.states[k]) for k in first.states)
    assert all(
        torch.equal(a, b) for a, b in zip(_states(again, _sentences(20, 0)), _states(_flair(lm), _sentences(20, 0)))
    )
    # another LM gets its own file
    reuse_states(_flair(td.tiny_char_lm(tmp_path / "bwd.pt", False)), _sentences(20, 0), tmp_path / "states")
    assert len(list((tmp_path / "states").glob("*.pt"))) == 2
    file.write_bytes(b"not states")
    with pytest.raises(InputError, match=f"{file.name}: not a model file of this toolkit, or corrupt"):
        reuse_states(_flair(lm), _sentences(20, 0), tmp_path / "states")
    torch.save({"format": "something else"}, file)
    with pytest.raises(InputError, match="not the character-LM states of this LM; delete it"):
        reuse_states(_flair(lm), _sentences(20, 0), tmp_path / "states")
    torch.save(
        {
            "format": "nas_charlm_states",
            "version": 1,
            "lm": first.digest,
            "sentences": ["a"],
            "lengths": torch.tensor([3]),
            "states": torch.zeros(2, 16),
        },
        file,
    )
    with pytest.raises(InputError, match="damaged character-LM states"):
        reuse_states(_flair(lm), _sentences(20, 0), tmp_path / "states")


def test_training_reads_states_and_tags_as_flairs_own_path(tmp_path, monkeypatch):
    from nas.cells.genotype import load
    from tagger import train
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings

    td.write_conll03(tmp_path / "data", sizes=(24, 8, 8))
    fwd, bwd = td.tiny_char_lm(tmp_path / "fwd.pt", True), td.tiny_char_lm(tmp_path / "bwd.pt", False)
    spec = f"glove:{td.write_vectors(tmp_path / 'vectors.txt')},pooled-flair:{fwd}:{bwd}"
    corpus = load_corpus("conll03", tmp_path / "data")
    config = TaggerConfig(
        hidden_size=8, batch_size=8, max_epochs=2, embeddings=spec, charlm_states=str(tmp_path / "states")
    )

    def run(name: str) -> dict:
        return train.train_runs(config, corpus, build_embeddings(spec), load("darts_v2"), tmp_path / name)

    cold, warm = run("cold"), run("warm")
    sentences = len({" ".join(s) for split in (corpus.train, corpus.dev, corpus.test) for s in split.tokens})
    assert (cold["charlm_states"]["computed"], cold["charlm_states"]["loaded"]) == (2 * sentences, 0)
    assert (warm["charlm_states"]["computed"], warm["charlm_states"]["loaded"]) == (0, 2 * sentences)
    assert (
        "character-LM states of 2 LMs: 0 sentence states computed" in (tmp_path / "warm" / "training.log").read_text()
    )
    monkeypatch.setattr(train, "_charlm_states", lambda *args: (None, []))  # flair computing states per batch
    flair = run("flair")
    assert flair["charlm_states"] is None
    assert cold["test"] == warm["test"] == flair["test"]
    assert cold["dev_f1_by_epoch"] == warm["dev_f1_by_epoch"] == flair["dev_f1_by_epoch"]
