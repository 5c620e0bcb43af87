import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nas.common.errors import InputError
from tagger.charlm import load_charlm
from tagger.cli.train_charlm import main as train_charlm
from tagger.cli.train_wordvec import main as train_wordvec
from tagger.synthetic import generate

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory):
    root = generate(tmp_path_factory.mktemp("syn"), seed=3, train=5, dev=5, test=5, lm_lines=300, raw_paragraphs=1)
    return root / "lm" / "train.txt"


def test_train_charlm_gives_a_pt_that_flair_embeddings_loads_and_embeds(tiny_text, tmp_path):
    from flair.data import Sentence
    from flair.embeddings import FlairEmbeddings

    out = tmp_path / "fwd"
    result = CliRunner().invoke(
        train_charlm,
        [
            "--data",
            str(tiny_text),
            "--direction",
            "forward",
            "--run-dir",
            str(out),
            "--hidden",
            "16",
            "--embedding",
            "8",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--seq-len",
            "30",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "bits per character" in result.output
    for lm in (FlairEmbeddings(str(out / "best-lm.pt")).lm, load_charlm(out / "best-lm.pt")):
        embeddings = FlairEmbeddings(lm)
        sentence = Sentence("Zendor Holdings said on Friday .")
        embeddings.embed(sentence)
        assert sentence[0].embedding.shape == (16,) and sentence[0].embedding.abs().sum() > 0
    import json

    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["direction"] == "forward" and 0 < provenance["valid_bpc"] < 8
    assert "bin/train-charlm" in provenance["command"] and provenance["corpus"] == str(tiny_text)


def test_train_charlm_on_the_cpu_where_cuda_is_available_is_one_line_naming_the_fix(tiny_text, tmp_path, monkeypatch):
    """flair's LanguageModelTrainer raises "data isnt on cuda" on a CPU run wherever CUDA is available (seen on an
    H100 machine); the command says so before it starts, and without --device it picks the GPU there."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["--data", str(tiny_text), "--direction", "forward", "--run-dir", str(tmp_path / "fwd"), "--epochs", "1"]
    result = CliRunner().invoke(train_charlm, [*args, "--device", "cpu"])
    assert result.exit_code == 2 and result.output == (
        "error: --device cpu: flair's LanguageModelTrainer refuses to "
        "train on the CPU where CUDA is available; use --device cuda\n"
    )
    assert not (tmp_path / "fwd").exists()


def test_load_charlm_refuses_a_pickle_that_would_run_code(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    torch.save({"state_dict": Exploit()}, path)
    with pytest.raises(InputError, match="evil.pt: not a Flair character LM"):
        load_charlm(path)
    assert not marker.exists()


def test_load_charlm_reads_files_saved_by_flair_itself_without_running_code(tmp_path):
    from flair.data import Dictionary
    from flair.models import LanguageModel

    dictionary = Dictionary()
    for char in "ab \n":
        dictionary.add_item(char)
    torch.manual_seed(0)
    original = LanguageModel(dictionary, True, 8, 1, 4)
    original.save(tmp_path / "flair.pt")  # flair's own format: pickle protocol 4
    loaded = load_charlm(tmp_path / "flair.pt")
    assert loaded.dictionary.idx2item == dictionary.idx2item
    assert all(torch.equal(a, b) for a, b in zip(original.state_dict().values(), loaded.state_dict().values()))

    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"dictionary": Exploit(), "state_dict": {}}, tmp_path / "evil4.pt", pickle_protocol=4)
    with pytest.raises(InputError, match="refused to load global"):
        load_charlm(tmp_path / "evil4.pt")
    assert not marker.exists()


def test_train_wordvec_writes_glove_text_the_vectors_reader_accepts(tiny_text, tmp_path):
    from gensim.models import KeyedVectors

    out = tmp_path / "vectors.txt"
    result = CliRunner().invoke(
        train_wordvec,
        ["--data", str(tiny_text), "--out", str(out), "--dim", "12", "--epochs", "2"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    first = out.read_text().splitlines()[0].split()
    assert len(first) == 13  # no header: a word and 12 numbers
    vectors = KeyedVectors.load_word2vec_format(out, binary=False, no_header=True)
    assert vectors.vector_size == 12 and "Friday" in vectors.key_to_index


def test_missing_corpus_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bin" / "train-wordvec"),
            "--data",
            str(tmp_path / "no.txt"),
            "--out",
            str(tmp_path / "v.txt"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr == f"error: {tmp_path / 'no.txt'}: no such file\n"
    assert not (tmp_path / "v.txt").exists()


RESOURCES = REPO / "resources"


@pytest.mark.parametrize("path", sorted((RESOURCES / "cells").glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_cell_validates_and_carries_provenance(path):
    from nas.cells import genotype

    geno = genotype.load(path)
    assert geno.name and geno.provenance
    prov = geno.provenance
    if prov.get("command", "").startswith("bin/search-lm"):  # found here: how, on what, at what budget
        assert prov["budget"] and prov["data"]["train"]
        assert prov["search_valid_ppl"] > 1 and prov["toolkit_version"] and prov["date"]
    elif prov.get("command", "").startswith("bin/sample-cells"):  # a random baseline: which draw
        assert prov["seed"] is not None and prov["index"] >= 1 and prov["toolkit_version"] and prov["date"]
    else:
        assert "source" in prov


def test_shipped_character_lms_are_small_documented_and_embed():
    import json

    from flair.data import Sentence
    from flair.embeddings import FlairEmbeddings

    for direction in ("forward", "backward"):
        pt = RESOURCES / "charlm" / f"wt2-{direction}.pt"
        provenance = json.loads((RESOURCES / "charlm" / f"wt2-{direction}.json").read_text())
        assert pt.stat().st_size <= 5_000_000
        assert provenance["direction"] == direction and "wikitext-2" in provenance["corpus"]
        assert provenance["valid_bpc"] > 0 and provenance["command"].startswith("bin/train-charlm")
        lm = load_charlm(pt)
        assert lm.is_forward_lm == (direction == "forward")
        sentence = Sentence("The cat sat on the mat .")
        FlairEmbeddings(lm).embed(sentence)
        assert sentence[2].embedding.shape == (lm.hidden_size,)
