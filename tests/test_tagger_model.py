"""The cell tagger: it learns, its run directory is complete, and a saved model reloads and predicts identically."""

import json
import os

import pytest
import torch

import tagger_data as td
from nas.common.errors import InputError
from nas.cells.genotype import load
from tagger import evaluation, prediction
from tagger.config import TaggerConfig
from tagger.corpora import load_corpus, to_sentences
from tagger.embeddings import build_embeddings
from tagger.model import load_tagger
from tagger.tag_schemes import iob2_to_bioes
from tagger.train import build_model, train_runs

torch.set_num_threads(1)  # tiny matmuls: extra threads only contend on a shared machine


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("tagger")
    td.write_conll03(root / "data")
    corpus = load_corpus("conll03", root / "data")
    embeddings = build_embeddings(f"glove:{td.write_vectors(root / 'vectors.txt')}")
    return root, corpus, embeddings


@pytest.fixture(scope="module")
def darts_run(setup):
    root, corpus, embeddings = setup
    config = TaggerConfig(cell="darts_v2", corpus="conll03", hidden_size=16, batch_size=4, max_epochs=6, seed=3)
    metrics = train_runs(config, corpus, embeddings, load("darts_v2"), root / "darts")
    return root / "darts", metrics


def test_darts_v2_learns_beyond_epoch_zero(darts_run):
    out, metrics = darts_run
    assert metrics["dev"]["f1"] > metrics["dev_f1_untrained"] + 0.2


def test_run_directory_holds_every_output(darts_run, setup):
    out, metrics = darts_run
    # finished: the model tested, no checkpoint (nothing left to resume), no final model unless asked for
    assert sorted(p.name for p in out.iterdir() if p.name != "tensorboard") == [
        "README.md",
        "best-model.pt",
        "config.json",
        "dev.tsv",
        "loss.tsv",
        "metrics.json",
        "test.conll",
        "training.log",
    ]
    config = json.loads((out / "config.json").read_text())
    assert config["genotype"]["name"] == "DARTS_V2" and config["hidden_size"] == 16
    stored = json.loads((out / "metrics.json").read_text())
    assert set(stored["test"]) == {"strict", "lenient", "f1"} and set(stored["test"]["strict"]) >= {
        "PER",
        "LOC",
        "ORG",
        "micro avg",
    }
    assert len(stored["seconds_per_epoch"]["each_train"]) == stored["epochs"] == 6
    # test.conll holds the test tokens and gold tags, and its predictions score to the recorded F1
    blocks = [b.splitlines() for b in (out / "test.conll").read_text().strip().split("\n\n")]
    corpus = setup[1]
    assert [[line.split()[0] for line in b] for b in blocks] == corpus.test.tokens
    assert [[line.split()[1] for line in b] for b in blocks] == corpus.test.tags
    pred = [[line.split()[2] for line in b] for b in blocks]
    assert evaluation.score(corpus.test.tags, pred)["f1"] == pytest.approx(stored["test"]["f1"])
    assert "TEST (best-model.pt, seqeval strict IOB2)" in (out / "training.log").read_text()


def test_saved_model_reloads_and_predicts_identically(darts_run, setup):
    out, _ = darts_run
    corpus = setup[1]
    model = load_tagger(out / "best-model.pt")
    assert model.genotype == load("darts_v2")
    pred = prediction.predict_tags(model, to_sentences(corpus.test, "ner"))
    recorded = [
        [line.split()[2] for line in b.splitlines()] for b in (out / "test.conll").read_text().strip().split("\n\n")
    ]
    assert pred == recorded
    again = load_tagger(out)  # a run directory works too
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_lstm_cell_is_flairs_bilstm_and_reloads(setup, tmp_path):
    _, corpus, embeddings = setup
    model = build_model(TaggerConfig(hidden_size=8), corpus, embeddings, None)
    assert isinstance(model.rnn, torch.nn.LSTM) and model.rnn.bidirectional
    sentences = to_sentences(corpus.dev, "ner")
    before = prediction.predict_tags(model, sentences)
    model.save(tmp_path / "lstm.pt")
    after = prediction.predict_tags(load_tagger(tmp_path / "lstm.pt"), sentences)
    assert before == after


def test_a_tagger_new_or_reloaded_trains_on_flairs_crf_loss(darts_run, setup):
    """Its loss is tagger.crf's, the number flair's own ViterbiLoss gives on the pair scores flair's
    CRF module forms from the same emissions."""
    from flair.models.sequence_tagger_utils.viterbi import ViterbiLoss

    from tagger.crf import CRFLoss

    _, corpus, embeddings = setup
    sentences = sorted(to_sentences(corpus.train, "ner")[:8], key=len, reverse=True)
    for model in (build_model(TaggerConfig(hidden_size=8), corpus, embeddings, None), load_tagger(darts_run[0])):
        model.eval()  # no dropout: both losses see the same emissions
        assert isinstance(model.loss_function, CRFLoss)
        ours = model.forward_loss(sentences)[0]
        emissions, lengths, transitions = model.forward(*model._prepare_tensors(sentences))
        flairs = ViterbiLoss(model.label_dictionary)(
            (emissions.unsqueeze(-1) + transitions, lengths, transitions), model._prepare_label_tensor(sentences)
        )
        torch.testing.assert_close(ours, flairs, rtol=1e-5, atol=0)


def test_training_runs_on_the_configs_device_whatever_flair_device_says(setup, tmp_path, monkeypatch):
    """flair trains on `flair.device`, which flair sets to the GPU wherever one exists; a library caller's
    TaggerConfig(device="cpu") trains on the CPU there. Stood in for by the meta device, where training cannot run."""
    import flair

    root, corpus, embeddings = setup
    monkeypatch.setattr(flair, "device", torch.device("meta"))
    config = TaggerConfig(cell="darts_v2", corpus="conll03", hidden_size=8, batch_size=4, max_epochs=1, seed=3)
    metrics = train_runs(config, corpus, embeddings, load("darts_v2"), tmp_path / "run")
    assert flair.device == torch.device("cpu") and 0 <= metrics["test"]["f1"] <= 1


def test_flair_trains_on_the_bioes_of_our_iob2(setup):
    _, corpus, embeddings = setup
    model = build_model(TaggerConfig(hidden_size=8), corpus, embeddings, load("darts_v2"))
    sentences = to_sentences(corpus.train, "ner")
    assert model._get_gold_labels(sentences) == [t for tags in corpus.train.tags for t in iob2_to_bioes(tags)]


def test_loading_a_model_never_runs_pickled_code(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"format": "nas-tagger-model", "state": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(InputError, match="refused: its pickle names posix.system"):
        load_tagger(tmp_path / "evil.pt")
    assert not marker.exists()


def test_a_file_of_another_kind_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(InputError, match="not a tagger model of this toolkit"):
        load_tagger(tmp_path / "other.pt")


def test_strict_iob2_and_lenient_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["I-PER", "I-PER", "O", "B-LOC"]]  # an entity opened by I-: conlleval counts it, strict IOB2 does not
    report = evaluation.score(gold, pred)
    assert report["lenient"]["micro avg"]["f1-score"] == pytest.approx(1.0)
    assert report["strict"]["micro avg"]["precision"] == pytest.approx(1.0)
    assert report["strict"]["micro avg"]["recall"] == pytest.approx(0.5)
    assert report["f1"] == pytest.approx(2 / 3)


def test_runs_summary_mean_and_sample_std():
    reports = [{"f1": 0.5, "strict": {"PER": {"f1-score": 0.4}}}, {"f1": 0.7, "strict": {"PER": {"f1-score": 0.8}}}]
    summary = evaluation.summarise(reports)
    assert summary["f1"]["mean"] == pytest.approx(0.6) and summary["f1"]["std"] == pytest.approx(0.1414213562)
    assert summary["per_type_f1"]["PER"]["mean"] == pytest.approx(0.6)


def test_cli_trains_two_seeds_and_prints_mean_and_std(setup):
    from click.testing import CliRunner

    from tagger.cli.train_tagger import main

    root = setup[0]
    out = root / "two-seeds"
    result = CliRunner().invoke(
        main,
        [
            "--cell",
            "darts_v2",
            "--corpus",
            "conll03",
            "--data",
            str(root / "data"),
            "--embeddings",
            f"glove:{root / 'vectors.txt'}",
            "--hidden-size",
            "4",
            "--max-epochs",
            "1",
            "--runs",
            "2",
            "--seed",
            "5",
            "--run-dir",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads((out / "metrics.json").read_text())
    f1s = [json.loads((out / f"seed-{s}" / "metrics.json").read_text())["test"]["f1"] for s in (5, 6)]
    assert [r["seed"] for r in summary["runs"]] == [5, 6] and summary["test"]["f1"]["runs"] == f1s
    assert summary["test"]["f1"]["mean"] == pytest.approx(sum(f1s) / 2)
    assert summary["test"]["f1"]["std"] == pytest.approx(abs(f1s[0] - f1s[1]) / 2**0.5)
    heading, header = result.stdout.splitlines()[:2]
    assert heading.startswith("test split (eng.testb, 12 sentences), ") and header.startswith("type")
    assert heading.endswith(" of 2 runs (seeds 5, 6), mean ± std over the runs, seqeval strict IOB2:")
    assert "micro avg" in result.stdout and "±" in result.stdout
    assert "epoch 1" not in result.stdout  # flair's log goes to stderr


def test_packed_cell_matches_each_sentence_run_alone():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    from tagger.model import PackedCellRNN

    torch.manual_seed(0)
    rnn = PackedCellRNN(load("darts_v2"), input_size=5, hidden_size=6).eval()
    lengths = torch.tensor([4, 2, 3])
    x = torch.randn(3, 4, 5)  # batch first, as flair packs it
    out, _ = rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    padded, _ = pad_packed_sequence(out, batch_first=True)
    for i, n in enumerate(lengths.tolist()):
        alone, _ = rnn.cell(x[i, :n].unsqueeze(1))  # (T, 1, input): no padding at all
        torch.testing.assert_close(padded[i, :n], alone[:, 0])
        assert padded.shape[-1] == 12 and torch.all(padded[i, n:] == 0)


def test_a_seed_fixes_a_run(setup):
    root, corpus, embeddings = setup
    config = TaggerConfig(hidden_size=4, batch_size=8, max_epochs=1, seed=7)
    runs = [train_runs(config, corpus, embeddings, load("darts_v2"), root / f"same-seed-{k}") for k in (1, 2)]
    assert runs[0]["test"] == runs[1]["test"]
    assert (root / "same-seed-1" / "test.conll").read_text() == (root / "same-seed-2" / "test.conll").read_text()


def test_an_existing_run_directory_is_not_overwritten(darts_run, setup):
    from click.testing import CliRunner

    from tagger.cli.train_tagger import main

    out, _ = darts_run
    before = (out / "metrics.json").read_text()
    root = setup[0]
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll03",
            "--data",
            str(root / "data"),
            "--embeddings",
            f"glove:{root / 'vectors.txt'}",
            "--run-dir",
            str(out),
        ],
    )
    assert result.exit_code == 2 and result.stderr == f"error: {out}: already holds a run; choose another --run-dir\n"
    assert (out / "metrics.json").read_text() == before


def test_train_with_dev_tests_the_final_model(setup):
    root, corpus, embeddings = setup
    config = TaggerConfig(hidden_size=4, batch_size=8, max_epochs=1, train_with_dev=True)
    metrics = train_runs(config, corpus, embeddings, load("darts_v2"), root / "with-dev")
    assert metrics["model"] == "final-model.pt" and not (root / "with-dev" / "best-model.pt").exists()
    assert metrics["dev_f1_untrained"] is None and "dev" not in metrics


@pytest.mark.parametrize("cell", ["nasabn_n1", "docs/experiments/ess_ptb_joint_seed3.json"])
def test_cells_with_attention_or_inter_gates_tag_and_reload(setup, tmp_path, cell):
    from pathlib import Path

    _, corpus, embeddings = setup
    genotype = load(cell if "/" not in cell else Path(__file__).resolve().parent.parent / cell)
    assert genotype.attention is not None or genotype.inter is not None
    model = build_model(TaggerConfig(hidden_size=8), corpus, embeddings, genotype)
    assert (model.rnn.cell.attention is not None) == (genotype.attention is not None)
    assert (model.rnn.cell.inter is not None) == (genotype.inter is not None)
    sentences = to_sentences(corpus.dev, "ner")
    before = prediction.predict_tags(model, sentences)
    model.save(tmp_path / "m.pt")
    assert prediction.predict_tags(load_tagger(tmp_path / "m.pt"), sentences) == before


def test_the_training_log_says_how_the_test_set_is_scored_and_nothing_false(darts_run, setup):
    out, _ = darts_run
    log = (out / "training.log").read_text()
    assert "Test data not provided" not in log and "0 test sentences" not in log
    assert (
        f"Corpus: 40 train + 12 dev sentences (+ {len(setup[1].test.tokens)} test sentences, scored after training)"
        in log
    )


@pytest.mark.parametrize("cell_init, bound", [("lstm", 40**-0.5), ("darts", 0.04)])
def test_cell_init_draws_the_cells_weights_in_its_range(setup, cell_init, bound):
    """lstm: ±1/√hidden as flair's LSTM (0.158 at hidden 40); darts: the DARTS code's ±0.04."""
    _, corpus, embeddings = setup
    config = TaggerConfig(cell="darts_v2", corpus="conll03", hidden_size=40, cell_init=cell_init)
    cell = build_model(config, corpus, embeddings, load("darts_v2")).rnn.cell
    for weight in (cell.w0, cell.ws):
        assert weight.abs().max() <= bound and weight.abs().max() > 0.95 * bound
        assert weight.std().item() == pytest.approx(bound / 3**0.5, rel=0.05)  # uniform, not a narrower draw


def test_the_default_cell_init_is_lstms():
    assert TaggerConfig().cell_init == "lstm"
    with pytest.raises(InputError, match="--cell-init glorot: expected one of lstm, darts"):
        TaggerConfig(cell_init="glorot").check()


def test_word_vectors_are_cut_to_the_corpus_and_the_most_frequent_with_the_same_scores(setup, tmp_path):
    """--word-vocab keeps each corpus word's vector and the file's first N words: the run scores
    exactly as with every vector, every corpus word finds the vector it had, and the model is smaller."""
    from tagger.embeddings import build_embeddings
    from tagger.model import load_tagger

    root, corpus, _ = setup
    lines = (root / "vectors.txt").read_text().splitlines()
    width = len(lines[0].split()) - 1
    rare = [f"rare{k}" for k in range(3000)]  # words of the file that no sentence holds
    (tmp_path / "big.txt").write_text(
        "\n".join(lines + [f"{w} " + " ".join([f"{k / 3000:.4f}"] * width) for k, w in enumerate(rare)]) + "\n"
    )
    runs = {}
    for vocab in (0, 2):
        config = TaggerConfig(
            cell="darts_v2",
            corpus="conll03",
            embeddings=f"glove:{tmp_path / 'big.txt'}",
            hidden_size=16,
            batch_size=4,
            max_epochs=4,
            lr=0.5,
            seed=3,
            word_vocab=vocab,
        )
        metrics = train_runs(
            config, corpus, build_embeddings(config.embeddings), load("darts_v2"), tmp_path / str(vocab)
        )
        runs[vocab] = metrics, load_tagger(tmp_path / str(vocab)).embeddings.embeddings[0]
    (full, all_vectors), (cut, kept) = runs[0], runs[2]
    assert cut["test"] == full["test"] and cut["dev_f1_by_epoch"] == full["dev_f1_by_epoch"]
    assert full["test"]["f1"] > 0.3  # a model that learned: equal scores mean equal predictions
    seen = {w for split in (corpus.train, corpus.dev, corpus.test) for sentence in split.tokens for w in sentence}
    vector = lambda table, w: table.embedding.weight[table.get_cached_token_index(w)]  # noqa: E731
    assert all(torch.equal(vector(kept, w), vector(all_vectors, w)) for w in seen)
    assert len(all_vectors.vocab) == len(lines) + len(rare) and not set(rare) & set(kept.vocab)
    assert set(kept.vocab) >= {line.split()[0] for line in lines[:2]}
    size = lambda run, metrics: (tmp_path / run / metrics["model"]).stat().st_size  # noqa: E731
    assert size("2", cut) < size("0", full) - 100_000


def test_live_curves_go_to_tensorboard_when_it_is_installed(setup, tmp_path, monkeypatch):
    """With TensorBoard installed, flair's TensorBoard plugin writes each epoch's loss and dev score
    under RUN_DIR/tensorboard while training runs (a stand-in writer here records what it is given)."""
    import sys
    import types

    written: list[tuple[str, str, int]] = []

    class SummaryWriter:
        def __init__(self, log_dir=None, comment=""):
            self.log_dir = log_dir

        def add_scalar(self, name, value, step, walltime=None):
            written.append((self.log_dir, name, step))

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=SummaryWriter))
    root, corpus, embeddings = setup
    config = TaggerConfig(cell="darts_v2", corpus="conll03", hidden_size=4, batch_size=8, max_epochs=2, seed=3)
    train_runs(config, corpus, embeddings, load("darts_v2"), tmp_path / "run")
    assert {log_dir for log_dir, _, _ in written} == {str(tmp_path / "run" / "tensorboard")}
    names = {name for _, name, _ in written}
    assert any("loss" in name for name in names) and any("score" in name for name in names), names
    assert {step for _, name, step in written if "score" in name} == {1, 2}


def test_prediction_one_batch_at_a_time_is_flairs_on_the_whole_list(darts_run, setup, monkeypatch):
    """predict_entities gives flair's predictions on the whole list (the same batches, in flair's
    length order, context set on the list's order), clearing each sentence's embeddings once rather
    than once per batch of the list."""
    from flair.data import Sentence

    corpus = setup[1]
    model = load_tagger(darts_run[0])
    texts = [" ".join(tokens) for tokens in corpus.test.tokens] + [""]  # an empty sentence, as flair skips it

    def entities(sentences):
        return [
            sorted(
                (
                    span[0].idx - 1,
                    span[-1].idx,
                    span.get_label(prediction.LABEL).value,
                    span.get_label(prediction.LABEL).score,
                )
                for span in s.get_spans(prediction.LABEL)
            )
            for s in sentences
        ]

    whole = [Sentence(text) for text in texts]
    model.predict(whole, mini_batch_size=3, label_name=prediction.LABEL)
    cleared = []
    clear = Sentence.clear_embeddings
    monkeypatch.setattr(Sentence, "clear_embeddings", lambda self, *a: (cleared.append(self), clear(self, *a))[1])
    ours = [Sentence(text) for text in texts]
    found = prediction.predict_entities(model, ours, batch_size=3)
    assert entities(ours) == entities(whole) and any(entities(ours))
    assert [[(e.start, e.end, e.label, e.score) for e in sorted(f, key=lambda e: e.start)] for f in found] == entities(
        whole
    )
    assert len(cleared) == len(texts) - 1  # each non-empty sentence once (flair's one call: once per batch each)
