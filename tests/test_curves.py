"""bin/plot-run: the training and validation curves of search, train-lm and tagger runs, built with the
real commands at tiny sizes; torn logs, runs of the wrong kind for plot-search, and --tensorboard."""

import csv
import json
import shutil
import sys
import types

import pytest
from click.testing import CliRunner

from nas.pictures.curves import read_curves
from conftest import write_lm_corpus
from nas.cli.plot_run import main as plot_run
from nas.cli.plot_search import main as plot_search
from nas.cli.search_lm import main as search_lm
from nas.cli.train_lm import main as train_lm

PNG = b"\x89PNG\r\n\x1a\n"
LM = [
    "--emsize",
    "8",
    "--batch-size",
    "4",
    "--bptt",
    "6",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "4",
    "--eval-batches",
    "4",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_tagger):
    """A search (ESS, 2 rounds), a train-lm run (2 epochs) and a copy of the session's tiny tagger run (3 epochs)."""
    root = tmp_path_factory.mktemp("curves")
    corpus = write_lm_corpus(root / "corpus")
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(corpus),
            "--method",
            "ess",
            "--search-space",
            "intra",
            "--run-dir",
            str(root / "search"),
            "--nhid",
            "8",
            "--nodes",
            "2",
            "--lr",
            "2",
            "--rounds",
            "2",
            "--intra-steps",
            "2",
            *LM[:8],
        ],
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(train_lm, ["--data", str(corpus), "--run-dir", str(root / "lm"), "--epochs", "2", *LM])
    assert result.exit_code == 0, result.output
    shutil.copytree(tiny_tagger[0], root / "tagger")
    return root


def logged(run, key):
    return [json.loads(line)[key] for line in (run / "log.jsonl").read_text().splitlines()]


def flair_table(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def curve(curves, metric, split, run=""):
    [found] = [s for s in curves.series if (s.metric, s.split, s.run) == (metric, split, run)]
    return found.x, found.values


def test_language_model_curves_are_the_logged_perplexities(runs):
    for name, kind, x_label in (("search", "search", "round"), ("lm", "train-lm", "epoch")):
        curves = read_curves(runs / name)
        assert (curves.kind, curves.x_label, curves.metrics()) == (kind, x_label, ["perplexity"])
        assert curve(curves, "perplexity", "valid") == ([1, 2], logged(runs / name, "valid_ppl"))
        assert curve(curves, "perplexity", "train (dropout on)") == ([1, 2], logged(runs / name, "train_ppl"))


def test_tagger_curves_are_flairs_loss_table(runs):
    curves = read_curves(runs / "tagger")
    rows = flair_table(runs / "tagger" / "loss.tsv")
    assert curves.kind == "tagger" and len(rows) == 3
    assert curve(curves, "loss", "train") == ([1, 2, 3], [float(r["TRAIN_LOSS"]) for r in rows])
    assert curve(curves, "loss", "dev") == ([1, 2, 3], [float(r["DEV_LOSS"]) for r in rows])
    assert curve(curves, "F1 (flair's micro average)", "dev")[1] == [float(r["DEV_F1"]) for r in rows]
    assert curve(curves, "learning rate", "train")[1] == [0.5] * 3  # the tiny tagger's --lr


@pytest.mark.parametrize("name", ["search", "lm", "tagger"])
def test_plot_run_writes_the_pictures(runs, tmp_path, name):
    result = CliRunner().invoke(plot_run, [str(runs / name), "--out", str(tmp_path / "pictures")])
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [str(tmp_path / "pictures" / f"curves.{ext}") for ext in ("png", "svg")]
    assert (tmp_path / "pictures" / "curves.png").read_bytes()[:8] == PNG
    svg = (tmp_path / "pictures" / "curves.svg").read_text()
    assert "valid" in svg if name != "tagger" else "dev" in svg and "learning rate" in svg


def test_every_seed_of_a_tagger_run_gets_its_curves(runs, tmp_path):
    run = tmp_path / "seeds"
    run.mkdir()
    shutil.copy(runs / "tagger" / "config.json", run)
    table = (runs / "tagger" / "loss.tsv").read_text()
    for seed in (10, 2):
        (run / f"seed-{seed}").mkdir()
        (run / f"seed-{seed}" / "loss.tsv").write_text(table)
    curves = read_curves(run)
    assert list(dict.fromkeys(s.run for s in curves.series)) == ["seed-2", "seed-10"]
    assert curve(curves, "loss", "dev", "seed-10") == curve(curves, "loss", "dev", "seed-2")
    result = CliRunner().invoke(plot_run, [str(run)])
    assert result.exit_code == 0, result.output
    assert "seed-10: dev" in (run / "plots" / "curves.svg").read_text()


def test_a_torn_last_line_is_left_out(runs, tmp_path):
    for name, log, torn in (
        ("lm", "log.jsonl", '{"epoch": 3, "train_ppl": 4'),
        ("search", "log.jsonl", '{"epo'),
        ("tagger", "loss.tsv", "4\t05:01:02\t0.5000\t0.2"),
    ):
        run = tmp_path / name
        shutil.copytree(runs / name, run)
        with open(run / log, "a") as handle:
            handle.write(torn)
        assert read_curves(run).series == read_curves(runs / name).series
        assert CliRunner().invoke(plot_run, [str(run)]).exit_code == 0
    assert CliRunner().invoke(plot_search, [str(tmp_path / "search")]).exit_code == 0


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    return result.stderr.strip()


def test_a_damaged_line_before_the_last_is_an_error_naming_it(runs, tmp_path):
    run = tmp_path / "lm"
    shutil.copytree(runs / "lm", run)
    lines = (run / "log.jsonl").read_text().splitlines(keepends=True)
    (run / "log.jsonl").write_text(lines[0][:20] + "\n" + "".join(lines[1:]))
    assert one_error_line(CliRunner().invoke(plot_run, [str(run)])).startswith(
        f"error: {run / 'log.jsonl'}: line 1: not a JSON record"
    )
    table = tmp_path / "tagger"
    shutil.copytree(runs / "tagger", table)
    rows = (table / "loss.tsv").read_text().splitlines(keepends=True)
    (table / "loss.tsv").write_text(rows[0] + "1\tx\n" + "".join(rows[2:]))
    assert one_error_line(CliRunner().invoke(plot_run, [str(table)])).startswith(
        f"error: {table / 'loss.tsv'}: line 2: expected 9 tab-separated fields with numbers under EPOCH, "
    )


def test_plot_search_on_other_runs_points_to_plot_run(runs):
    for name, kind in (("lm", "train-lm"), ("tagger", "tagger")):
        run = runs / name
        assert (
            one_error_line(CliRunner().invoke(plot_search, [str(run)]))
            == f"error: {run}: a {kind} run, not a search; draw its curves with bin/plot-run {run}"
        )


def test_runs_with_nothing_to_draw(runs, tmp_path):
    assert (
        one_error_line(CliRunner().invoke(plot_run, [str(tmp_path)]))
        == f"error: {tmp_path}: not a run directory (no config.json)"
    )
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(runs / "lm" / "config.json", fresh)
    (fresh / "log.jsonl").write_text("")
    assert (
        one_error_line(CliRunner().invoke(plot_run, [str(fresh)]))
        == f"error: {fresh}: a train-lm run with no finished epoch yet (nothing in log.jsonl)"
    )
    assert not (fresh / "plots").exists()


def test_tensorboard_without_the_package_is_one_line_and_writes_nothing(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed, whether or not it is
    result = CliRunner().invoke(plot_run, [str(runs / "lm"), "--out", str(tmp_path / "out"), "--tensorboard"])
    assert one_error_line(result) == "error: --tensorboard needs the tensorboard package: pip install tensorboard"
    assert not (tmp_path / "out").exists()


def test_tensorboard_events_hold_every_curve_a_seed_per_directory(runs, tmp_path, monkeypatch):
    written = []

    class SummaryWriter:  # records what torch's writer would be given
        def __init__(self, log_dir):
            self.log_dir = log_dir

        def add_scalar(self, tag, value, step):
            written.append((self.log_dir, tag, value, step))

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "tensorboard", types.ModuleType("tensorboard"))
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=SummaryWriter))
    run = tmp_path / "seeds"
    for seed in (1, 2):
        shutil.copytree(runs / "tagger", run / f"seed-{seed}")
    shutil.copy(runs / "tagger" / "config.json", run)
    stale = run / "plots" / "tensorboard" / "seed-1" / "events.out.tfevents.1.old"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    result = CliRunner().invoke(plot_run, [str(run), "--tensorboard"])
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    rows = flair_table(runs / "tagger" / "loss.tsv")
    for seed in (1, 2):
        where = str(run / "plots" / "tensorboard" / f"seed-{seed}")
        assert [(tag, value, step) for d, tag, value, step in written if d == where and tag == "loss/dev"] == [
            ("loss/dev", float(r["DEV_LOSS"]), int(r["EPOCH"])) for r in rows
        ]
    assert len(written) == 2 * 4 * 3  # 2 seeds × 4 curves × 3 epochs


def test_a_curve_of_one_epoch_is_drawn_as_a_point():
    """A one-epoch run: every curve, training ones too (dashed lines without markers), shows its point."""
    import matplotlib.pyplot as plt

    from nas.pictures.curves import Series
    from nas.pictures.plots import draw_curves

    fig, ax = plt.subplots()
    draw_curves(
        ax,
        [
            Series("loss", "train", [1], [0.9]),
            Series("f1", "dev", [1], [0.5]),
            Series("loss", "train", [1, 2], [0.9, 0.7]),
        ],
    )
    assert [line.get_marker() for line in ax.get_lines()] == ["o", "o", ""]
    plt.close(fig)
