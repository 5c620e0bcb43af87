"""A pooled-Flair tagger's word memory travels with its file: the run's reported scores are what the
saved model scores in a fresh process, through bin/evaluate, bin/tag and flair's own loader."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tagger_data as td

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pooled_run(tmp_path_factory):
    """(run directory, data directory) of a DARTS_V2 tagger on GloVe-style vectors + pooled Flair, 3 epochs."""
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.synthetic import generate
    from tagger.train import train_runs

    root = tmp_path_factory.mktemp("pooled")
    data = generate(root / "data", seed=0, train=120, dev=30, test=30, lm_lines=30, raw_paragraphs=2)
    vectors = td.label_vectors(data / "iob2" / "train.txt", root / "vectors.txt")
    fwd, bwd = td.tiny_char_lm(root / "fwd.pt", True), td.tiny_char_lm(root / "bwd.pt", False)
    config = TaggerConfig(
        cell="darts_v2",
        corpus="conll03",
        data=str(data / "conll03"),
        embeddings=f"glove:{vectors},pooled-flair:{fwd}:{bwd}",
        hidden_size=16,
        batch_size=8,
        max_epochs=3,
        lr=0.5,
        seed=1,
    )
    train_runs(
        config,
        load_corpus("conll03", data / "conll03"),
        build_embeddings(config.embeddings),
        load("darts_v2"),
        root / "run",
    )
    return root / "run", data


def _predicted(conll: str) -> list[list[str]]:
    return [[row.split(" ")[-1] for row in block.splitlines()] for block in conll.strip().split("\n\n")]


def _bin(name: str, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bin" / name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_bin_evaluate_in_a_fresh_process_reproduces_the_runs_score_and_predictions(pooled_run, tmp_path):
    run, _ = pooled_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["pooled_memory"]["words"] > 100  # the memory was saved, and the card says its size
    assert f"{metrics['pooled_memory']['words']:,} words" in (run / "README.md").read_text()
    done = _bin("evaluate", "--model", run, "--out", tmp_path / "eval")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["test"] == metrics["test"]
    assert (tmp_path / "eval" / "test.conll").read_bytes() == (run / "test.conll").read_bytes()
    done = _bin("evaluate", "--model", run, "--split", "dev", "--out", tmp_path / "dev")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "dev" / "metrics.json").read_text())["dev"] == metrics["dev"]


def test_bin_tag_and_flairs_own_loader_predict_the_runs_test_tags(pooled_run, tmp_path):
    run, data = pooled_run
    expected = _predicted((run / "test.conll").read_text())
    done = _bin("tag", "--model", run, "--columns", data / "conll03" / "eng.testb")
    assert done.returncode == 0, done.stderr
    assert _predicted(done.stdout) == expected

    words = [
        [row.split(" ")[0] for row in block.splitlines()]
        for block in (run / "test.conll").read_text().strip().split("\n\n")
    ]
    script = (
        "import tagger, json\nfrom flair.data import Sentence\nfrom flair.models import SequenceTagger\n"
        "from tagger.prediction import entity_tags\n"
        f"model = SequenceTagger.load({str(run / 'best-model.pt')!r})\n"
        f"sentences = [Sentence(w) for w in {words!r}]\n"
        "model.predict(sentences, mini_batch_size=64, label_name='p')\n"
        "from tagger.tag_schemes import from_spans\n"
        "print(json.dumps([from_spans(len(s), [(x[0].idx - 1, x[-1].idx, x.tag) for x in s.get_spans('p')])"
        " for s in sentences]))\n"
    )
    flair = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert flair.returncode == 0, flair.stderr[-2000:]
    assert json.loads(flair.stdout.strip().splitlines()[-1]) == expected


def test_a_file_without_the_pooled_names_gets_them_back(pooled_run, tmp_path):
    """flair 0.15 saves no name for a pooled embedding; rebuilt under flair's default name it would
    sort elsewhere among the token's vectors, and the model would read its features in another order."""
    from tagger import evaluation
    from tagger.corpora import load_corpus, to_sentences
    from tagger.model import load_for_prediction

    run, data = pooled_run
    state = torch.load(run / "best-model.pt", weights_only=False)
    names = [params.pop("name") for params in state["embeddings"]["embeddings"][1:]]
    torch.save(state, tmp_path / "nameless.pt")
    defaults = [
        Path(p["contextual_embeddings"]["name"]).as_posix() + "-context" for p in state["embeddings"]["embeddings"][1:]
    ]
    glove = state["embeddings"]["embeddings"][0]["name"]
    assert sorted([glove, *names]).index(glove) != sorted([glove, *defaults]).index(glove)  # the order would change
    model = load_for_prediction(tmp_path / "nameless.pt")
    assert [e.name for e in model.embeddings.embeddings[1:]] == names
    test = load_corpus("conll03", data / "conll03").test
    _, predicted = evaluation.evaluate_saved(model, to_sentences(test, "ner"), test.tags)
    assert predicted == _predicted((run / "test.conll").read_text())


def _without_memory(source: Path, target: Path) -> None:
    """`source` as flair, or this toolkit before it saved the memory and names, would have written it."""
    state = torch.load(source, weights_only=False)
    for params in state["embeddings"]["embeddings"]:
        params.pop("memory", None)
        if params["__cls__"] == "PooledFlairEmbeddings":
            params.pop("name")
    torch.save(state, target)


def test_a_model_saved_without_its_memory_warns_once_and_export_rebuilds_it(pooled_run, tmp_path):
    run, _ = pooled_run
    old = tmp_path / "old"
    old.mkdir()
    for name in ("config.json", "metrics.json"):
        (old / name).write_bytes((run / name).read_bytes())
    _without_memory(run / "best-model.pt", old / "best-model.pt")
    done = _bin("evaluate", "--model", old, "--out", tmp_path / "eval-old")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "saved without the word memory" in warnings[0] and "--rebuild-memory" in warnings[0]

    done = _bin("export", old, "--rebuild-memory", "--out", old / "rebuilt.pt")
    assert done.returncode == 0, done.stderr
    assert "rebuilt the pooled-Flair memory from 150 sentences" in done.stderr
    done = _bin("evaluate", "--model", old / "rebuilt.pt", "--out", tmp_path / "eval-rebuilt", "--corpus", "conll03")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    rebuilt = json.loads((tmp_path / "eval-rebuilt" / "metrics.json").read_text())["test"]["f1"]
    assert rebuilt == json.loads((run / "metrics.json").read_text())["test"]["f1"]


def test_memory_round_trips_and_a_damaged_one_is_one_line(pooled_run, tmp_path):
    from nas.common.errors import InputError
    from tagger.model import load_tagger
    from tagger.pooled_memory import memory_state, pooled_embeddings

    run, _ = pooled_run
    first = [memory_state(e) for e in pooled_embeddings(load_tagger(run))]
    again = [memory_state(e) for e in pooled_embeddings(load_tagger(run))]
    assert [m["words"] for m in first] == [m["words"] for m in again] and len(first) == 2
    assert all(
        torch.equal(a["vectors"], b["vectors"]) and torch.equal(a["counts"], b["counts"]) for a, b in zip(first, again)
    )
    state = torch.load(run / "best-model.pt", weights_only=False)
    state["embeddings"]["embeddings"][1]["memory"]["vectors"] = torch.zeros(3, 2)
    torch.save(state, tmp_path / "damaged.pt")
    with pytest.raises(
        InputError, match=r"damaged.pt: field 'embeddings.embeddings\[1\].memory.vectors': 3 vectors for"
    ):
        load_tagger(tmp_path / "damaged.pt")


def test_the_bound_keeps_the_saved_words_and_at_most_so_many_more():
    from tagger.pooled_memory import RecentWords

    memory = RecentWords(2, {"saved": 0, "also": 1})
    for word in ["a", "b", "saved", "c", "a", "d"]:
        memory[word] = memory.get(word, 0) + 10
    assert list(memory) == ["saved", "also", "a", "d"]  # saved words first, then the 2 most recent
    assert memory["saved"] == 10 and memory["a"] == 10  # "a" was dropped after "c" and came back afresh
