"""bin/transfer: 2 cells × 1 corpus × 2 seeds of real train-tagger runs; the table, the JSON, the plot, resuming."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tagger_data as td
from nas.common import grid
from nas.common.errors import InputError
from nas.common.stats import paired_t_test
from tagger import significance, transfer
from tagger.cli.transfer import main


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One benchmark, trained once: darts_v2 sized like the LSTM at hidden 8, one epoch per run."""
    root = tmp_path_factory.mktemp("transfer")
    td.write_conll03(root / "data", sizes=(16, 8, 8))
    vectors = td.write_vectors(root / "vectors.txt")
    args = [
        "--cells",
        "darts_v2,lstm",
        "--corpora",
        f"conll03:{root / 'data'}",
        "--seeds",
        "2",
        "--hidden-size",
        "8",
        "--run-dir",
        str(root / "bench"),
        "--threads",
        "1",
        "--",
        "--embeddings",
        f"glove:{vectors}",
        "--max-epochs",
        "1",
        "--batch-size",
        "8",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    return root / "bench", args, result


def metrics(run_dir, cell, seed):
    return json.loads((run_dir / "conll03" / cell / f"seed-{seed}" / "metrics.json").read_text())


def test_each_run_is_an_ordinary_train_tagger_run_at_equal_parameters(bench):
    run_dir, _, _ = bench
    lstm, cell = metrics(run_dir, "lstm", 1), metrics(run_dir, "darts_v2", 1)
    assert lstm["hidden_size"] == 8 and lstm["rnn_parameters"] == 2 * (4 * 8 * 16 + 4 * 8 * 8 + 8 * 8) == 1664
    # the cell's size that comes closest: 2·(2h(16+h) + 16h²) is 1,680 at h = 6 (1,134 at 5, 2,352 at 7)
    assert cell["hidden_size"] == 6 and cell["rnn_parameters"] == 1680
    assert cell["matched_to"] == {"cell": "lstm", "hidden_size": 8, "rnn_parameters": 1664}
    config = json.loads((run_dir / "conll03" / "darts_v2" / "seed-2" / "config.json").read_text())
    assert config["seed"] == 2 and config["match_params"] == "lstm:8" and config["threads"] == 1
    assert config["charlm_states"] == str(
        (run_dir / "charlm-states" / "conll03").resolve()
    )  # shared by the corpus's runs
    assert cell["epochs"] == 1 and len(cell["dev_f1_by_epoch"]) == 1


def test_the_table_and_json_hold_the_runs_figures_and_the_paired_test(bench):
    run_dir, _, result = bench
    report = json.loads((run_dir / "transfer.json").read_text())
    rows = {r["cell"]: r for r in report["rows"]}
    tests = {c: [metrics(run_dir, c, s)["test"]["f1"] for s in (1, 2)] for c in ("darts_v2", "lstm")}
    devs = {c: [metrics(run_dir, c, s)["dev"]["f1"] for s in (1, 2)] for c in ("darts_v2", "lstm")}
    for cell in ("darts_v2", "lstm"):
        assert rows[cell]["test_f1"]["runs"] == tests[cell] and rows[cell]["dev_f1"]["runs"] == devs[cell]
        assert rows[cell]["test_f1"]["mean"] == pytest.approx(sum(tests[cell]) / 2)
    expected = paired_t_test(tests["darts_v2"], tests["lstm"])
    assert rows["lstm"]["vs_lstm"] is None
    assert rows["darts_v2"]["vs_lstm"]["p"] == expected.p and rows["darts_v2"]["vs_lstm"]["seeds"] == 2
    aso = significance.seed_level_test(tests["darts_v2"], tests["lstm"])
    assert rows["darts_v2"]["vs_lstm"]["aso"] == asdict(aso) and aso.seeds == 2
    table = (run_dir / "transfer.md").read_text()
    assert table.strip() == result.stdout.strip()
    line = next(row for row in table.splitlines() if row.startswith("| conll03 | darts_v2 |"))
    mean, std = 100 * rows["darts_v2"]["test_f1"]["mean"], 100 * rows["darts_v2"]["test_f1"]["std"]
    assert "| 6 | 1,680 | 1 |" in line and f"{mean:.2f} ± {std:.2f}" in line and line.endswith("| 2 |")
    # the headline: the test over training runs, with the seeds it rests on
    verdict = {"better": "darts_v2 better", "worse": "lstm better"}.get(aso.verdict, "undecided")
    delta = 100 * (tests["darts_v2"][0] - tests["lstm"][0] + tests["darts_v2"][1] - tests["lstm"][1]) / 2
    headline = (
        f"| conll03 | darts_v2 | lstm | 2 | {delta:+.2f} | {aso.epsilon_min:.2f} | "
        f"{aso.epsilon_min_reverse:.2f} | {verdict} | {expected.p:.3g} |"
    )
    assert headline.replace("-0.00 |", "+0.00 |") in table.splitlines()
    assert "Is the cell better? The test over training runs, which answers it: Almost Stochastic Order" in table
    assert (run_dir / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_bootstrap_over_test_sentences_agrees_with_each_runs_f1(bench):
    """Per seed, the bootstrap's observed difference is the two runs' test F1 difference (span counts
    from test.conll give seqeval's F1); pooled, it is the F1 of counts summed over both seeds."""
    run_dir, _, result = bench
    rows = {r["cell"]: r for r in json.loads((run_dir / "transfer.json").read_text())["rows"]}
    boot = rows["darts_v2"]["bootstrap"]
    assert rows["lstm"]["bootstrap"] == {"lstm": None, "random": None} and boot["random"] is None
    assert boot["lstm"]["against"] == ["lstm"] and boot["lstm"]["seeds"] == [1, 2]
    for seed in (1, 2):
        d = boot["lstm"]["per_seed"][str(seed)]
        expected = metrics(run_dir, "darts_v2", seed)["test"]["f1"] - metrics(run_dir, "lstm", seed)["test"]["f1"]
        assert d["difference"] == pytest.approx(expected, abs=1e-12) and 0 < d["p"] <= 1 and d["low"] <= d["high"]
    pooled = boot["lstm"]["pooled"]
    assert pooled["samples"] == 10_000 and pooled["low"] <= pooled["difference"] <= pooled["high"]
    # in the table it is the per-seed detail, each seed's pair of trained models: pooled is in the JSON only
    lines = result.stdout.splitlines()
    assert any(line.startswith("Per-seed detail: paired bootstrap over test sentences") for line in lines)
    for seed in (1, 2):
        d = boot["lstm"]["per_seed"][str(seed)]
        signed = [f"{100 * x:+.2f}".replace("-0.00", "+0.00") for x in (d["difference"], d["low"], d["high"])]
        row = f"| conll03 | darts_v2 | lstm | {seed} | {signed[0]} | [{signed[1]}, {signed[2]}] | {d['p']:.3g} |"
        assert row in lines


def test_each_cell_is_compared_with_the_random_cells_mean(tmp_path):
    cells = transfer.parse_cells("found,rand_a,rand_b,lstm")
    corpus = transfer.parse_corpora(f"conll03:{tmp_path}")
    bench = transfer.Benchmark(tmp_path, cells, corpus, 2, 8, random_cells=("rand_a", "rand_b"))
    rng = np.random.default_rng(0)
    counts = {
        (c.name, s): np.column_stack([rng.integers(0, 2, 40), np.ones(40, int), np.ones(40, int)])
        for c in cells
        for s in (1, 2)
    }
    result = bench._bootstrap("conll03", "found", counts)
    assert result["random"]["against"] == ["rand_a", "rand_b"] and result["random"]["seeds"] == [1, 2]
    f1 = {c.name: significance.f1(counts[(c.name, 1)].sum(0) + counts[(c.name, 2)].sum(0)) for c in cells}
    assert result["random"]["pooled"]["difference"] == pytest.approx(f1["found"] - (f1["rand_a"] + f1["rand_b"]) / 2)
    assert bench._bootstrap("conll03", "rand_a", counts)["random"] is None  # a random cell is not compared with itself
    with pytest.raises(InputError, match="^--random-cells nope: not among --cells"):
        transfer.Benchmark(tmp_path, cells, corpus, 2, 8, random_cells=("nope",))


def test_each_cell_gets_a_paired_t_test_against_the_random_cells_mean_of_each_seed(tmp_path):
    from scipy.stats import ttest_rel

    cells = transfer.parse_cells("found,rand_a,rand_b,lstm")
    bench = transfer.Benchmark(
        tmp_path, cells, transfer.parse_corpora(f"conll03:{tmp_path}"), 3, 8, random_cells=("rand_a", "rand_b")
    )
    f1 = {"found": [0.80, 0.84, 0.83], "rand_a": [0.78, 0.80, 0.79], "rand_b": [0.76, 0.84], "lstm": [0.79, 0.81, 0.8]}
    runs = [
        {
            "cell": c,
            "seed": s,
            "test_f1": f,
            "dev_f1": None,
            "seconds_per_epoch": None,
            "hidden_size": 8,
            "rnn_parameters": 1,
            "epochs": 1,
        }
        for c, values in f1.items()
        for s, f in enumerate(values, 1)
    ]
    random = bench._random_mean(runs)
    assert random == pytest.approx({1: 0.77, 2: 0.82})  # seed 3: rand_b did not finish it
    row = transfer._row("found", "conll03", [r for r in runs if r["cell"] == "found"], None, random)
    assert row["vs_random"]["seeds"] == 2 and row["vs_random"]["mean_difference"] == pytest.approx(0.025)
    assert row["vs_random"]["p"] == pytest.approx(ttest_rel([0.80, 0.84], [0.77, 0.82]).pvalue)
    aso = significance.seed_level_test([0.80, 0.84], [random[1], random[2]])
    assert row["vs_random"]["aso"] == asdict(aso)
    table = transfer.markdown([row], "params", 8, None).splitlines()
    assert table[4].endswith("| 82.33 ± 2.08 | 3 |")
    assert (
        f"| conll03 | found | random cells' mean | 2 | +2.50 | {aso.epsilon_min:.2f} | "
        f"{aso.epsilon_min_reverse:.2f} | undecided | 0.126 |"
    ) in table
    assert "random cells' mean" not in transfer.markdown([{**row, "vs_random": None}], "params", 8, None)


def test_with_several_random_cells_each_cell_is_also_tested_against_all_their_runs_unpaired(tmp_path):
    """Against every run of every random cell (3 here: seeds 1-2, one seed missing): ASO of
    the two sets unpaired, Welch's t-test, and the difference of the means, by hand."""
    from scipy.stats import ttest_ind

    names = ["found", "rand_a", "rand_b"]
    bench = transfer.Benchmark(
        tmp_path,
        transfer.parse_cells(",".join(names)),
        transfer.parse_corpora(f"conll03:{tmp_path}"),
        2,
        8,
        random_cells=("rand_a", "rand_b"),
    )
    f1 = {"found": [0.80, 0.84], "rand_a": [0.78, 0.80], "rand_b": [0.76]}
    (tmp_path / "conll03").mkdir()
    for cell, values in f1.items():
        for seed, value in enumerate(values, 1):
            run = tmp_path / "conll03" / cell / f"seed-{seed}"
            run.mkdir(parents=True)
            figures = {"hidden_size": 8, "rnn_parameters": 1, "epochs": 1, "seconds_per_epoch": {"train": 1.0}}
            (run / "metrics.json").write_text(json.dumps({**figures, "test": {"f1": value}}))
    rows = {r["cell"]: r for r in bench.results()["rows"]}
    vs = rows["found"]["vs_random_runs"]
    random_runs = [0.78, 0.80, 0.76]
    assert vs["runs"] == [2, 3] and vs["mean_difference"] == pytest.approx(0.82 - 0.78)
    assert vs["p"] == pytest.approx(ttest_ind([0.80, 0.84], random_runs, equal_var=False).pvalue)
    assert vs["aso"] == asdict(significance.seed_level_test([0.80, 0.84], random_runs, paired=False))
    assert rows["rand_a"]["vs_random_runs"] is None  # a random cell is not compared with them
    table = transfer.markdown(list(rows.values()), "params", 8, None)
    assert f"| conll03 | found | random cells' runs | 2 / 3 | +4.00 | {vs['aso']['epsilon_min']:.2f} |" in table


def test_one_seed_says_so_instead_of_a_spread_or_a_test():
    runs = [
        {
            "cell": c,
            "seed": 1,
            "test_f1": f,
            "dev_f1": f - 0.01,
            "seconds_per_epoch": 2.0,
            "hidden_size": 8,
            "rnn_parameters": 1,
            "epochs": 1,
        }
        for c, f in (("found", 0.8125), ("lstm", 0.8))
    ]
    rows = [transfer._row("found", "conll03", runs[:1], {1: 0.8}), transfer._row("lstm", "conll03", runs[1:], None)]
    assert rows[0]["vs_lstm"]["aso"]["verdict"] == "1 seed" and rows[0]["vs_lstm"]["p"] is None
    table = transfer.markdown(rows, "params", 8, None)
    assert "± 0.00" not in table
    assert "| conll03 | found | 8 | 1 | 1 | 2.0 | 80.25 (1 seed) | 81.25 (1 seed) | 1 |" in table.splitlines()
    assert "| conll03 | found | lstm | 1 | +1.25 | — | — | 1 seed: no test over training runs | — |" in table.split(
        "\n"
    )


def test_a_second_start_skips_finished_runs_and_restarts_an_unfinished_one(bench, monkeypatch, tmp_path):
    run_dir, args, _ = bench
    unfinished = run_dir / "conll03" / "lstm" / "seed-2"
    # what train-tagger wrote, put back by the fake run below (worker.json is the benchmark's own)
    kept = shutil.copytree(unfinished, tmp_path / "kept", ignore=shutil.ignore_patterns("worker.json"))
    (unfinished / "metrics.json").unlink()  # as if interrupted before its end
    (unfinished / "stale.txt").write_text("left by the interrupted run")
    calls = []

    def fake_run_module(name, argv, log):  # stands in for the one train-tagger run still to do
        calls.append((name, argv, sorted(p.name for p in unfinished.iterdir())))
        shutil.copytree(kept, unfinished, dirs_exist_ok=True)
        return 0

    monkeypatch.setattr(grid, "run_module", fake_run_module)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    assert (
        len(calls) == 1 and calls[0][0] == "tagger.cli.train_tagger" and calls[0][2] == []
    )  # started in an empty directory
    argv = calls[0][1]
    assert argv[argv.index("--cell") + 1] == "lstm" and argv[argv.index("--seed") + 1] == "2"
    assert argv[argv.index("--run-dir") + 1] == str(unfinished) and argv[argv.index("--hidden-size") + 1] == "8"
    assert "3 finished before, 1 to train" in result.stderr

    monkeypatch.setattr(grid, "run_module", lambda *a: pytest.fail("a finished run was trained again"))
    assert CliRunner().invoke(main, args).exit_code == 0


def test_a_failed_run_leaves_only_its_log_and_the_error_names_it(bench, tmp_path, monkeypatch):
    _, args, _ = bench
    args = [*args]
    args[args.index("--run-dir") + 1] = str(tmp_path / "failing")

    def failing_run_module(name, argv, log):  # a train-tagger that wrote some files, then failed
        run = log.parent
        (run / "checkpoint.pt").write_bytes(b"half")
        (run / "sub").mkdir()
        log.write_text("epoch 1 ...\nerror: out of patience\n")
        return 2

    monkeypatch.setattr(grid, "run_module", failing_run_module)
    result = CliRunner().invoke(main, args)
    failed = tmp_path / "failing" / "conll03" / "darts_v2" / "seed-1"
    assert result.exit_code == 2 and "bin/train-tagger failed (exit 2): error: out of patience" in result.stderr
    assert sorted(p.name for p in failed.iterdir()) == ["train-tagger.log"]


def test_resuming_with_other_settings_is_refused(bench):
    run_dir, args, _ = bench
    at = args.index("--hidden-size") + 1
    other = [*args[:at], "16", *args[at + 1 :]]
    result = CliRunner().invoke(main, other)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {run_dir}: its runs were trained with hidden_size 8, not 16; give the same "
        "settings to resume, or another --run-dir\n"
    )


@pytest.mark.parametrize(
    "text, says",
    [
        ("conll2000", "--corpora conll2000: expected [NAME=]FORMAT:PATH"),
        ("nope:data", "--corpora nope:data: expected [NAME=]FORMAT:PATH"),
        ("conll2000:a,conll2000:b", "--corpora: conll2000 given twice (name them: NAME=FORMAT:PATH)"),
    ],
)
def test_corpora_errors(text, says):
    with pytest.raises(InputError, match=f"^{__import__('re').escape(says)}"):
        transfer.parse_corpora(text)


def test_corpora_and_cells_parse():
    assert transfer.parse_corpora("a=column:d/x,wnut17:/w") == [
        transfer.Corpus("a", "column", "d/x"),
        transfer.Corpus("wnut17", "wnut17", "/w"),
    ]
    assert [(c.name, c.spec) for c in transfer.parse_cells("darts_v2, runs/x/cell.json,LSTM")] == [
        ("darts_v2", "darts_v2"),
        ("cell", "runs/x/cell.json"),
        ("lstm", "LSTM"),
    ]


def test_flags_the_benchmark_sets_itself_are_refused_after_the_dashes(tmp_path):
    result = CliRunner().invoke(
        main, ["--corpora", "conll2000:x", "--run-dir", str(tmp_path / "b"), "--", "--hidden-size", "4"]
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: --hidden-size: bin/transfer sets it for each run")
    assert not (tmp_path / "b").exists()


def test_a_states_folder_given_after_the_dashes_is_every_runs(tmp_path):
    cells, corpora = transfer.parse_cells("darts_v2"), transfer.parse_corpora("conll2000:d")
    given = transfer.Benchmark(tmp_path, cells, corpora, 1, 8, tagger_args=("--charlm-states", "/s"))
    argv = given.tagger_argv(given.runs[0])
    assert argv.count("--charlm-states") == 1 and argv[argv.index("--charlm-states") + 1] == "/s"


def _same_results(run_dir, other):
    """The figures of two benchmarks, timings aside: each run's F1s, epochs and sizes, and the tests."""

    def figures(path):
        report = json.loads((path / "transfer.json").read_text())
        runs = sorted(
            (r["cell"], r["seed"], r["test_f1"], r["dev_f1"], r["epochs"], r["rnn_parameters"]) for r in report["runs"]
        )
        rows = [(r["cell"], r["test_f1"], r["dev_f1"], r["vs_lstm"], r["bootstrap"]) for r in report["rows"]]
        return runs, rows

    assert figures(run_dir) == figures(other)


def _intervals(path):
    report = json.loads((path / "transfer.json").read_text())
    return [r["worker"] for r in report["runs"]]


def test_two_workers_on_a_local_ray_instance_overlap_and_give_the_sequential_table(bench, tmp_path):
    pytest.importorskip("ray")
    run_dir, args, _ = bench
    args = [*args]
    args[args.index("--run-dir") + 1] = str(tmp_path / "ray")
    result = CliRunner().invoke(main, [*args[: args.index("--")], "--workers", "2", *args[args.index("--") :]])
    assert result.exit_code == 0, result.stderr
    assert "4 to train, 2 at a time" in result.stderr
    _same_results(run_dir, tmp_path / "ray")
    workers = _intervals(tmp_path / "ray")
    assert len({w["node"] for w in workers}) == 1 and workers[0]["node"] != "local"
    assert any(
        w["started"] < other["ended"] and other["started"] < w["ended"]
        for w in workers
        for other in workers
        if w is not other
    ), workers  # two ran at once


@pytest.mark.slow  # 24 s (a real two-node cluster); the local Ray workers above run in the default suite
def test_a_grid_sent_to_a_two_node_ray_cluster_runs_on_both_nodes(bench, tmp_path):
    pytest.importorskip("ray")
    ray = [str(Path(sys.executable).parent / "ray")]
    port = 6390
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 characters
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1"]
    try:
        env = {**os.environ, "RAY_worker_niceness": "0"}  # as the docs say to start a cluster
        subprocess.run(
            [*ray, "start", "--head", "--port", str(port), *common, "--include-dashboard=false", f"--temp-dir={temp}"],
            check=True,
            capture_output=True,
            env=env,
        )
        subprocess.run(
            [*ray, "start", "--address", f"127.0.0.1:{port}", *common], check=True, capture_output=True, env=env
        )
        run_dir, args, _ = bench
        args = [*args]
        args[args.index("--run-dir") + 1] = str(tmp_path / "cluster")
        result = CliRunner().invoke(
            main,
            [
                *args[: args.index("--")],
                "--workers",
                "2",
                "--ray-address",
                f"127.0.0.1:{port}",
                *args[args.index("--") :],
            ],
        )
        assert result.exit_code == 0, result.stderr
        assert f"on the Ray cluster at 127.0.0.1:{port}" in result.stderr
        assert len({w["node"] for w in _intervals(tmp_path / "cluster")}) == 2  # both nodes took runs
        _same_results(run_dir, tmp_path / "cluster")
    finally:
        subprocess.run([*ray, "stop", "--force"], capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


def test_more_workers_without_ray_say_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    with pytest.raises(InputError, match=r"^--workers 2: runs at once need Ray, which is not installed; pip install"):
        grid.check_workers(2, None)
    grid.check_workers(1, None)  # one at a time needs nothing
