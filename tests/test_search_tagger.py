"""The search on the tagging task: it writes a genotype train-tagger trains, α moves on held-apart
training sentences only, a resumed search equals an uninterrupted one, second order runs."""

import json
from collections import Counter
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from nas.common.runs import Interrupted, RunDir
from nas.cells.genotype import load
from nas.methods.darts import Darts
from nas.cells.search_cell import SearchRNN
from tagger import tagging_search
from tagger.cli.search_tagger import main
from tagger.tagging_search import BiSearchRNN, TaggingSearch
from tagger.tagging_search_config import TaggingSearchConfig
from tagger.corpora import load_corpus
from tagger.embeddings import build_embeddings

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("search-tagger")
    td.write_conll03(root / "data")
    vectors = td.write_vectors(root / "vectors.txt")
    config = TaggingSearchConfig(
        corpus="conll03",
        data=str(root / "data"),
        embeddings=f"glove:{vectors}",
        hidden_size=8,
        nodes=3,
        batch_size=8,
        epochs=2,
        seed=4,
        hessian_iterations=2,  # the health's eigenvalue is tested in test_search_health_tagger; 2 keep it in the logs
    )
    return root, config, load_corpus("conll03", root / "data"), build_embeddings(config.embeddings)


def search(setup, path, **changes) -> TaggingSearch:
    _, config, corpus, embeddings = setup
    return TaggingSearch(replace(config, **changes), RunDir(path), corpus, embeddings)


def test_found_cell_trains_with_train_tagger(setup, tmp_path, restore_flair_logging):
    root, config, _, _ = setup
    flags = ["--corpus", "conll03", "--data", config.data, "--embeddings", config.embeddings]
    result = CliRunner().invoke(
        main,
        [
            *flags,
            "--hidden-size",
            "8",
            "--nodes",
            "3",
            "--batch-size",
            "8",
            "--epochs",
            "2",
            "--hessian-iterations",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "cell.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} == {
        "config.json",
        "log.jsonl",
        "metrics.json",
        "checkpoint.pt",
        "genotype.json",
    }
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and all(0 <= r["dev_f1"] <= 1 for r in log)
    cell = load(tmp_path / "cell.json")
    assert cell == load(run / "genotype.json") and cell.steps == 3
    assert [[list(edge) for edge in node] for node in cell.nodes] == log[-1]["genotype"]
    assert cell.provenance["task"] == "tagging" and cell.provenance["arch_split"] == 0.5
    assert json.loads((run / "metrics.json").read_text())["search_dev_f1"] == log[-1]["dev_f1"]

    from tagger.cli.train_tagger import main as train_tagger

    result = CliRunner().invoke(
        train_tagger,
        [
            "--cell",
            str(tmp_path / "cell.json"),
            *flags,
            "--hidden-size",
            "4",
            "--max-epochs",
            "1",
            "--run-dir",
            str(tmp_path / "tagger"),
        ],
    )
    assert result.exit_code == 0, result.output
    trained = json.loads((tmp_path / "tagger" / "config.json").read_text())["genotype"]
    assert trained["name"] == "darts_tagger_search_seed1" and trained["nodes"] == log[-1]["genotype"]


def test_alpha_moves_and_steps_on_held_apart_training_sentences_only(setup, tmp_path, monkeypatch):
    _, _, corpus, _ = setup
    converted = []
    to_sentences = tagging_search.to_sentences
    monkeypatch.setattr(
        tagging_search, "to_sentences", lambda split, kind: converted.append(split.name) or to_sentences(split, kind)
    )
    s = search(setup, tmp_path)
    assert "test" not in converted
    held, weights = {id(x) for x in s.alpha_sentences}, {id(x) for x in s.train_sentences}
    words = Counter(" ".join(t.text for t in x) for x in [*s.alpha_sentences, *s.train_sentences])
    assert words == Counter(" ".join(t) for t in corpus.train.tokens)  # a partition of the training split
    assert len(held) == round(0.5 * len(corpus.train.tokens))
    seen = {"alpha": set(), "weights": set()}
    architect = s.method.architects["all"]
    step = architect.step

    def spy(train, train_hidden, valid, valid_hidden, eta):
        seen["weights"].update(map(id, train))
        seen["alpha"].update(map(id, valid))
        return step(train, train_hidden, valid, valid_hidden, eta)

    architect.step = spy
    before = s.layer.cell.alpha.detach().clone()
    s.start()
    s.run()
    assert seen["alpha"] == held and seen["weights"] == weights
    assert (s.layer.cell.alpha - before).abs().max() > s.config.arch_lr  # more than one Adam step's worth
    assert s.layer.directions[1].alpha is s.layer.cell.alpha  # both directions mix with the one α


def test_the_search_runs_on_the_configs_device_whatever_flair_device_says(setup, tmp_path, monkeypatch):
    """flair embeds on `flair.device`, which flair sets to the GPU wherever one exists; a library caller's
    config with device cpu searches on the CPU there. Stood in for by the meta device, where nothing computes."""
    import flair

    monkeypatch.setattr(flair, "device", torch.device("meta"))
    s = search(setup, tmp_path, epochs=1)
    s.start()
    assert s.run().steps == 3 and flair.device == torch.device("cpu")


def test_resumed_search_equals_uninterrupted(setup, tmp_path):
    whole = search(setup, tmp_path / "whole")
    whole.start()
    expected = whole.run()

    def stop_in_second_epoch(s):
        if s.epoch == 1 and s.batch == 1:
            s.stop.request()

    cut = search(setup, tmp_path / "cut")
    cut.start()
    with pytest.raises(Interrupted, match="stopped in epoch 2 after batch 1"):
        cut.run(on_batch=stop_in_second_epoch)
    resumed = search(setup, tmp_path / "cut")
    resumed.resume()
    assert resumed.run() == expected
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
    logs = [RunDir(tmp_path / d).read_log() for d in ("whole", "cut")]
    for a, b in zip(*logs):
        assert {k: v for k, v in a.items() if k not in ("seconds", "tokens_per_s")} == {
            k: v for k, v in b.items() if k not in ("seconds", "tokens_per_s")
        }
    assert len(logs[1]) == 2


def test_second_order_steps_alpha_otherwise(setup, tmp_path):
    alphas = {}
    for order in (1, 2):
        s = search(setup, tmp_path / str(order), order=order, method="idarts", epochs=1, max_batches_per_epoch=2)
        s.start()
        s.run()
        alphas[order] = s.layer.cell.alpha.detach()
    assert torch.isfinite(alphas[2]).all() and not torch.allclose(alphas[1], alphas[2])


def test_bidirectional_layer_reads_each_sentence_alone():
    torch.manual_seed(0)
    layer = BiSearchRNN(*(SearchRNN(5, 6, 3, Darts.rule) for _ in range(2))).eval()
    lengths = torch.tensor([4, 2, 3])
    x = torch.randn(3, 4, 5)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(layer(packed)[0], batch_first=True)
    for i, n in enumerate(lengths.tolist()):
        sentence = x[i, :n].unsqueeze(1)
        forward, _ = layer.directions[0](sentence)
        backward, _ = layer.directions[1](sentence.flip(0))
        torch.testing.assert_close(out[i, :n], torch.cat([forward, backward.flip(0)], -1)[:, 0])


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--arch-split", "1.5"], "--arch-split: must be in (0, 1), got 1.5"),
        (["--arch-split", "0.01"], "--arch-split 0.01: leaves 0 of 40 training sentences for α and 40 for the weights"),
        (["--corpus", None], "--corpus: required (unless --resume)"),
        (["--batch-size", "1"], "--batch-size: the search cell's BatchNorm needs at least 2 sentences a batch, got 1"),
    ],
)
def test_bad_settings_are_one_line_errors(setup, tmp_path, flags, says, restore_flair_logging):
    _, config, _, _ = setup
    args = {
        "--corpus": "conll03",
        "--data": config.data,
        "--embeddings": config.embeddings,
        "--run-dir": str(tmp_path / "run"),
    }
    args.update(dict(zip(flags[::2], flags[1::2])))
    result = CliRunner().invoke(main, [a for k, v in args.items() if v is not None for a in (k, v)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {says}") and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"learning_rate": 0.1}, "'learning_rate' is not a setting of bin/search-tagger (a config of another command"),
        ({"nodes": 0}, "a stored setting is out of range (--nodes: must be at least 1, got 0)"),
    ],
)
def test_an_edited_config_is_refused_naming_the_file(setup, tmp_path, edit, says, restore_flair_logging):
    """On --resume the run's config.json is checked field by field, and its problems name the file."""
    from dataclasses import asdict

    _, config, _, _ = setup
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**asdict(config), **edit}))
    (run / "checkpoint.pt").write_bytes(b"")  # a run that started
    before = (run / "config.json").read_bytes()
    result = CliRunner().invoke(main, ["--resume", str(run)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {run / 'config.json'}: {says}")
    assert result.stderr.count("\n") == 1 and (run / "config.json").read_bytes() == before


# Every method of bin/search-lm searches on the tagging task, on the same loop.
QUICK = {"epochs": 2, "max_batches_per_epoch": 2, "candidates": 3, "track_candidates": 2, "controller_steps": 3}


@pytest.mark.parametrize(
    "method, changes", [("ess", {}), ("ess", {"search_space": "intra"}), ("random", {}), ("enas", {})]
)
def test_every_method_finds_a_cell_the_tagger_trains(setup, tmp_path, method, changes):
    from tagger.model import recurrent_layer

    s = search(setup, tmp_path, method=method, **QUICK, **changes)
    s.start()
    genotype = s.run()
    assert genotype == load(tmp_path / "genotype.json") and genotype.steps == 3
    assert genotype.provenance["task"] == "tagging" and genotype.provenance["method"] == method
    log = RunDir(tmp_path).read_log()
    nodes = [[list(e) for e in n] for n in genotype.nodes]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert [r["epoch"] for r in log] == [1, 2]
    if method in ("random", "enas"):  # the best of the candidates, each scored on the held-apart sentences
        assert len(metrics["candidates"]) == 3 and "held-apart" in metrics["candidate_scoring"]
        best = metrics["candidates"][metrics["selected"]]
        assert best["nodes"] == nodes and best["valid_ppl"] == min(c["valid_ppl"] for c in metrics["candidates"])
        assert 0 <= metrics["search_dev_f1"] <= 1
    else:
        assert nodes == log[-1]["genotype"]
    assert (genotype.inter is not None) == (method == "ess" and not changes)
    layer = recurrent_layer(genotype, 5, 4)  # what train-tagger builds from it
    out, _ = layer(torch.nn.utils.rnn.pack_sequence([torch.randn(3, 5), torch.randn(2, 5)]))
    assert out.data.shape == (5, 8)


def test_ess_steps_its_two_groups_in_turn_and_both_directions_share_every_alpha(setup, tmp_path):
    s = search(setup, tmp_path, method="ess", epochs=1, max_batches_per_epoch=4)
    forward, backward = s.layer.directions
    assert backward.alpha is forward.alpha and backward.inter.f.alpha is forward.inter.f.alpha
    assert backward.inter.g.alpha is forward.inter.g.alpha and backward.w0 is not forward.w0
    assert [s.method.phase(b) for b in range(s.method.batches_per_epoch(4))] == ["intra"] * 2 + ["inter"] * 2
    before = {"intra": forward.alpha.detach().clone(), "inter": forward.inter.f.alpha.detach().clone()}
    s.start()
    s.run()
    assert not torch.equal(before["intra"], forward.alpha) and not torch.equal(before["inter"], forward.inter.f.alpha)


@pytest.mark.parametrize("method", ["enas", "ess"])
def test_resumed_search_of_other_methods_equals_uninterrupted(setup, tmp_path, method):
    """The method's own state (ENAS's controller and draws, ESS's two α groups) goes into the checkpoint."""
    whole = search(setup, tmp_path / "whole", method=method, **QUICK)
    whole.start()
    expected = whole.run()

    def stop_in_second_epoch(s):
        if s.epoch == 1 and s.batch == 1:
            s.stop.request()

    cut = search(setup, tmp_path / "cut", method=method, **QUICK)
    cut.start()
    with pytest.raises(Interrupted):
        cut.run(on_batch=stop_in_second_epoch)
    resumed = search(setup, tmp_path / "cut", method=method, **QUICK)
    resumed.resume()
    assert resumed.run() == expected
    for name, value in whole.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--method", "random", "--controller-steps", "5"], "--controller-steps: only with --method enas"),
        (["--method", "enas", "--order", "2"], "--order: this method has no α step to take"),
        (["--method", "ess", "--search-space", "inter"], "--search-space inter: not on the tagging task"),
        (["--method", "ess", "--history", "4"], "--history 4: needs at least as many --inter-nodes (got 3)"),
    ],
)
def test_method_flags_that_do_not_fit_are_one_line_errors(setup, tmp_path, flags, says, restore_flair_logging):
    _, config, _, _ = setup
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll03",
            "--data",
            config.data,
            "--embeddings",
            config.embeddings,
            "--run-dir",
            str(tmp_path / "run"),
            *flags,
        ],
    )
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {says}") and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()
