"""Word vectors and embedding specs: the formats read, the values they give, and the refusals."""

from pathlib import Path

import numpy as np
import pytest

from nas.common.errors import InputError
from tagger.embeddings import build_embeddings, parse_spec
from tagger.wordvec import packaged_vectors, read_vector_file

FIXTURE_LM = Path(__file__).resolve().parents[2] / "shared" / "data" / "flair-lm-fixture" / "best-lm.pt"


def test_packaged_glove_6b_50d_matches_published_vectors():
    words, vectors = packaged_vectors("glove-6b-50d")
    assert len(words) == 400000 and vectors.shape == (400000, 50)
    index = {w: i for i, w in enumerate(words)}
    # first components of glove.6B.50d.txt, as Stanford distributes it
    assert words[:3] == ["the", ",", "."] and words[-1] == "sandberger"
    np.testing.assert_allclose(vectors[index["the"]][:4], [0.418, 0.24968, -0.41242, 0.1217], rtol=1e-5)
    np.testing.assert_allclose(vectors[index["king"]][:4], [0.50451, 0.68607, -0.59517, -0.022801], rtol=1e-5)


@pytest.mark.parametrize("name,binary", [("vectors.txt", False), ("vectors.bin", True)])
def test_word2vec_files_with_header(tmp_path, name, binary):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=3)
    kv.add_vectors(["alpha", "beta", "gamma"], np.arange(9, dtype=np.float32).reshape(3, 3))
    kv.save_word2vec_format(str(tmp_path / name), binary=binary)
    words, vectors = read_vector_file(str(tmp_path / name))
    assert words == ["alpha", "beta", "gamma"]
    np.testing.assert_array_equal(vectors, np.arange(9).reshape(3, 3))


def test_glove_text_without_header_and_its_flair_lookup(tmp_path):
    from flair.data import Sentence

    (tmp_path / "g.txt").write_text("paris 1 2\nthe 3 4\n")
    embeddings = build_embeddings(f"glove:{tmp_path / 'g.txt'}")
    sentence = Sentence(["Paris", "the", "unseen"])
    embeddings.embed(sentence)
    assert [t.embedding.tolist() for t in sentence] == [[1, 2], [3, 4], [0, 0]]  # lower-cased lookup, zero for unknown


def test_refusals(tmp_path):
    (tmp_path / "v.kv").write_bytes(b"\x80\x04")
    with pytest.raises(InputError, match="pickle"):
        read_vector_file(str(tmp_path / "v.kv"))
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 1 2\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_vector_file(str(tmp_path / "bad.txt"))
    with pytest.raises(InputError, match="KIND:ARG"):
        parse_spec("word2vec:x.txt")
    with pytest.raises(InputError, match="forward and a backward"):
        parse_spec("flair:fwd.pt")
    assert parse_spec("glove:a.txt, pooled-flair:f.pt:b.pt") == [
        ("glove", ["a.txt"]),
        ("pooled-flair", ["f.pt", "b.pt"]),
    ]


@pytest.mark.slow
@pytest.mark.skipif(not FIXTURE_LM.is_file(), reason="needs ../shared/data/flair-lm-fixture")
def test_external_flair_lm_file_loads_and_embeds():
    from flair.data import Sentence

    embeddings = build_embeddings(f"pooled-flair:{FIXTURE_LM}:{FIXTURE_LM}")
    sentence = Sentence(["Hello", "world", "."])
    embeddings.embed(sentence)
    assert embeddings.embedding_length == 4 * 128 and sentence[0].embedding.abs().sum() > 0
