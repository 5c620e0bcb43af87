import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nas.cells import genotype
from nas.methods.architect import Architect
from nas.fast.backends import CpuFused, search_fusable
from nas.fast.gemm import Gemm
from nas.cli.search_lm import main as search_lm
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus
from nas.common.errors import InputError
from nas.lm.model import RNNModel, language_model_loss, lm_loss
from nas.common.runs import Interrupted, RunDir
from nas.runs.config import SearchConfig
from nas.methods import METHODS, Entry
from nas.methods.darts import Darts
from nas.runs.search import Searcher
from nas.cells.search_cell import SearchRNN

ONEDNN = Gemm("onednn")  # the fused paths' rule that takes oneDNN where this torch has it (and the shape asks)

REPO = Path(__file__).resolve().parent.parent
TINY = [
    "--emsize",
    "12",
    "--nhid",
    "12",
    "--nodes",
    "3",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "6",
    "--lr",
    "2",
]


def run_cli(args):
    return CliRunner().invoke(search_lm, args, catch_exceptions=False)


def test_finite_difference_hvp_matches_autograd():
    torch.manual_seed(0)
    rnn = SearchRNN(6, 6, steps=2, rule=Darts.rule)
    rnn.backend = CpuFused(ONEDNN)
    model = RNNModel(20, 6, rnn, dropout=0.0, dropouti=0.0).double()
    words, targets = torch.randint(20, (5, 3)), torch.randint(20, (5, 3))
    architect = Architect(model, loss_fn=language_model_loss, average=lambda tensors: tensors)
    weights = {n: p.detach() for n, p in architect.weights.items()}
    v = [torch.randn_like(p) for p in weights.values()]
    approx = architect.hessian_vector_product(weights, v, (words, targets), None)

    rnn.backend = None  # the exact second derivative through autograd; the fused cell is once differentiable
    logits = model(words, None)[0]
    grads = torch.autograd.grad(lm_loss(logits, targets), list(architect.weights.values()), create_graph=True)
    exact = torch.autograd.grad(sum((g * vi).sum() for g, vi in zip(grads, v)), [rnn.alpha])
    # central differences with DARTS's step R = 0.01/‖v‖ leave an O(R²) truncation error of about 1%
    assert (approx[0] - exact[0]).norm() / exact[0].norm() < 0.02
    assert exact[0].abs().max() > 1e-3  # the check is not vacuous


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])
def test_eval_mode_normalises_each_state_as_training_did(fused):
    """Once the running statistics have seen a batch, eval mode gives on it what training mode gave:
    s0 and every node keep their own statistics, though their scales differ by orders of magnitude
    (one BatchNorm shared by all, as in DARTS, shrinks s0 and the early nodes in eval mode)."""
    torch.manual_seed(0)
    cell = SearchRNN(7, 6, 8, Darts.rule)
    cell.backend = CpuFused(ONEDNN) if fused else None
    with torch.no_grad():
        for w in cell.ws:
            w.uniform_(-0.5, 0.5)
    for bn in cell.bn:
        bn.momentum = 1.0  # the running statistics: the last batch's
    x = torch.randn(1, 256, 7)
    assert (cell.backend is not None and search_fusable(cell, x)) == fused
    trained, _ = cell(x)
    cell.eval()
    with torch.no_grad():
        evaluated, _ = cell(x)
    torch.testing.assert_close(evaluated, trained.detach(), rtol=0.01, atol=0.01)


@pytest.mark.parametrize("method", ["darts", "idarts"])
@pytest.mark.parametrize("order", ["1", "2"])
def test_two_epoch_search_writes_a_valid_genotype(lm_corpus, tmp_path, method, order):
    out = tmp_path / "cell.json"
    result = run_cli(
        [
            "--data",
            str(lm_corpus),
            "--method",
            method,
            "--order",
            order,
            "--epochs",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(out),
            "--seed",
            "3",
            *TINY,
            *(["--top-n", "2"] if method == "idarts" else []),
        ]
    )  # darts refuses it: no effect there
    assert result.exit_code == 0, result.output
    geno = genotype.load(out)
    assert geno.steps == 3
    assert all(len(node) == (2 if method == "idarts" else 1) for node in geno.nodes)
    prov = geno.provenance
    assert prov["method"] == method and prov["epochs"] == 2 and prov["seed"] == 3
    assert prov["search_valid_ppl"] > 1 and "bin/search-lm" in prov["command"]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    assert {"train_ppl", "valid_ppl", "alpha", "mad", "genotype", "tokens_per_s"} <= set(log[0])
    assert json.loads((tmp_path / "run" / "config.json").read_text())["order"] == int(order)
    minutes = json.loads((tmp_path / "run" / "metrics.json").read_text())["minutes"]
    assert sum(r["seconds"] for r in log) / 60 < minutes < 1  # training, and validation and the rest besides


def _searcher(lm_corpus, run_dir, epochs=2, **settings):
    paths = find_splits(lm_corpus)
    small = dict(
        emsize=12, nhid=12, nodes=3, batch_size=4, bptt=8, eval_batch_size=2, max_batches_per_epoch=6, lr=2.0, order=2
    )
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        epochs=epochs,
        **{**small, **settings},
    )
    run = RunDir(run_dir)
    return config, run, Searcher(config, run, Corpus.load(paths))


def test_resume_after_interruption_gives_the_same_alpha(lm_corpus, tmp_path):
    config, run, straight = _searcher(lm_corpus, tmp_path / "straight")
    run.start({})
    straight.run()

    config, run, first = _searcher(lm_corpus, tmp_path / "interrupted")
    run.start({})

    def stop_mid_second_epoch(s):
        if s.epoch == 1 and s.batch == 3:
            s.stop.request()

    with pytest.raises(Interrupted):
        first.run(on_batch=stop_mid_second_epoch)
    _, _, resumed = _searcher(lm_corpus, tmp_path / "interrupted")
    resumed.load_state(run.load_checkpoint())
    assert (resumed.epoch, resumed.batch) == (1, 3)
    resumed.run()
    assert torch.equal(resumed.rnn.alpha, straight.rnn.alpha)
    assert torch.equal(resumed.rnn.w0, straight.rnn.w0)


def test_cli_resume_extends_a_finished_run(lm_corpus, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(["--data", str(lm_corpus), "--epochs", "1", "--run-dir", str(run_dir), *TINY]).exit_code == 0
    result = run_cli(["--resume", str(run_dir), "--epochs", "2", "--out", str(tmp_path / "cell.json")])
    assert result.exit_code == 0, result.output
    assert [json.loads(l)["epoch"] for l in (run_dir / "log.jsonl").read_text().splitlines()] == [1, 2]
    assert genotype.load(tmp_path / "cell.json").provenance["epochs"] == 2


def test_lr_decay_scales_both_steps_like_a_lower_lr(lm_corpus, tmp_path):
    # one epoch of --lr 2 decayed by 0.5 from epoch 1 is one epoch of --lr 1: the weight step and the
    # second-order α step (whose unrolled step takes the weights' lr) alike
    runs = {}
    for name, settings in (("decayed", dict(lr=2.0, lr_decay=0.5, lr_decay_start=1)), ("lower", dict(lr=1.0))):
        _, run, searcher = _searcher(lm_corpus, tmp_path / name, epochs=1, **settings)
        run.start({})
        searcher.run()
        runs[name] = searcher
    assert torch.equal(runs["decayed"].rnn.alpha, runs["lower"].rnn.alpha)
    assert torch.equal(runs["decayed"].rnn.w0, runs["lower"].rnn.w0)
    assert SearchConfig(lr=20, lr_decay=0.5, lr_decay_start=3).epoch_lr(4) == 5  # 20, 20, 10, 5


def test_cli_resume_may_decay_the_lr_of_epochs_not_yet_run(lm_corpus, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(["--data", str(lm_corpus), "--epochs", "2", "--run-dir", str(run_dir), *TINY]).exit_code == 0
    refused = run_cli(["--resume", str(run_dir), "--epochs", "4", "--lr-decay", "0.5", "--lr-decay-start", "2"])
    assert refused.exit_code == 2
    assert "would change the lr of epoch 2, which" in refused.output and "from epoch 3 on" in refused.output
    config = json.loads((run_dir / "config.json").read_text())
    del config["lr_decay"], config["lr_decay_start"]  # as a run of an earlier version stored it
    (run_dir / "config.json").write_text(json.dumps(config))
    result = run_cli(["--resume", str(run_dir), "--epochs", "4", "--lr-decay", "0.5", "--lr-decay-start", "3"])
    assert result.exit_code == 0, result.output
    assert "--lr-decay 0.5: the run goes on to it (it had 1.0)" in result.output
    assert [json.loads(l)["lr"] for l in (run_dir / "log.jsonl").read_text().splitlines()] == [2, 2, 1, 0.5]
    assert json.loads((run_dir / "config.json").read_text())["lr_decay"] == 0.5


def test_bf16_search_steps_in_bf16_and_moves_alpha_as_fp32_does(lm_corpus, tmp_path):
    alphas = {}
    for precision in ("fp32", "bf16"):
        # hessian_iterations=0: the health pass (nas.runs.health) is fp32 with gradients on purpose, outside the steps
        _, run, searcher = _searcher(
            lm_corpus, tmp_path / precision, epochs=1, precision=precision, hessian_iterations=0
        )
        run.start({})
        seen = set()  # (dtype of the logits, grad enabled): training steps and evaluation
        searcher.model.decoder.register_forward_hook(lambda m, i, out: seen.add((out.dtype, torch.is_grad_enabled())))
        start = searcher.model.rnn.alpha.detach().clone()
        searcher.run()
        alphas[precision] = searcher.model.rnn.alpha.detach() - start
        assert all(p.dtype == torch.float32 for p in searcher.model.parameters())
    assert (torch.bfloat16, True) in seen and (torch.float32, False) in seen  # bf16 steps, fp32 validation
    assert (torch.float32, True) not in seen
    # the second-order α step under bf16 moves α the way fp32 does, not by the same amounts
    cosine = torch.nn.functional.cosine_similarity(alphas["fp32"].flatten(), alphas["bf16"].flatten(), dim=0)
    assert 0.8 < cosine < 1 - 1e-6


def test_nan_loss_stops_keeps_the_last_good_checkpoint_and_writes_no_genotype(lm_corpus, tmp_path):
    config, run, searcher = _searcher(lm_corpus, tmp_path / "run", epochs=3)
    run.start({})

    def poison(s):
        if s.epoch == 1 and s.batch == 2:
            with torch.no_grad():
                s.model.encoder.weight.fill_(float("nan"))

    with pytest.raises(InputError, match="loss became nan in epoch 2"):
        searcher.run(on_batch=poison)
    state = run.load_checkpoint()
    assert state["epoch"] == 1 and all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (tmp_path / "run" / "genotype.json").exists()


def test_a_search_that_diverges_on_validation_warns_and_writes_strict_json(lm_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr("nas.runs.search.Validation.full", lambda self: float("nan"))
    out = tmp_path / "cell.json"
    result = run_cli(
        ["--data", str(lm_corpus), "--epochs", "1", "--run-dir", str(tmp_path / "run"), "--out", str(out), *TINY]
    )
    assert result.exit_code == 0, result.output
    assert "warning: the search's last validation perplexity is not finite" in result.output

    def refuse(name):
        raise ValueError(f"{name} in a JSON file")

    assert json.loads(out.read_text(), parse_constant=refuse)["provenance"]["search_valid_ppl"] is None
    assert genotype.load(out).steps == 3


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "case,expected",
    [
        ("missing_dir", "no such directory"),
        ("missing_split", "no test split"),
        ("empty", "empty corpus"),
        ("short", "shorter than one batch of"),
        ("not_utf8", "line 2: bytes that are not UTF-8"),
    ],
)
def test_bad_corpora_give_one_line_and_exit_2(tmp_path, lm_corpus, case, expected):
    data = tmp_path / "bad"
    if case != "missing_dir":
        for split in ("train", "valid", "test"):
            write(data / f"{split}.txt", (lm_corpus / f"ptb.{split}.txt").read_bytes())
    if case == "missing_split":
        (data / "test.txt").unlink()
    elif case == "empty":
        write(data / "valid.txt", b"\n  \n")
    elif case == "short":
        write(data / "valid.txt", b"a b c\n")
    elif case == "not_utf8":
        write(data / "train.txt", b"a b c\nd \xff e\n")
    result = run_cli(["--data", str(data), "--run-dir", str(tmp_path / "run"), *TINY])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_the_command_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / "search-lm"), "--data", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"error: {tmp_path / 'nope'}: no such directory\n"


def test_nas_commands_import_no_torch_before_their_work_starts():
    """--help and a flag error must not wait for torch: the command modules import it only in their body."""
    commands = ["search_lm", "train_lm", "eval_lm", "compare_words", "plot_search", "plot_cell", "sample_cells"]
    code = (
        f"import sys; [__import__('nas.cli.' + c) for c in {commands}]; "
        "print(sorted(m for m in ('torch', 'matplotlib', 'flair') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_light_flag_choices_match_what_the_library_accepts():
    from nas.runs import config
    from nas.cells.attention import SEARCH_CHOICES
    from nas.cells.genotype import SIZE_MATCHES
    from nas.cells.ops import SQUASHES

    assert config.ATTENTION_CHOICES == SEARCH_CHOICES
    assert config.GATE_SQUASHES == tuple(SQUASHES) and config.GATE_SIZE_MATCHES == SIZE_MATCHES


class FrozenAlpha(Darts):
    """A method added as a plug-in: DARTS's layer whose α never steps."""

    def step_alpha(self, batch, train, train_hidden, valid, valid_hidden, eta):
        return valid_hidden


def test_a_registered_method_runs_through_the_unchanged_loop(lm_corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "frozen", Entry(lambda: FrozenAlpha, "α fixed at its start"))
    config, run, searcher = _searcher(lm_corpus, tmp_path / "run", epochs=1, method="frozen", order=1, seed=3)
    config.validate()
    run.start({})
    alpha, w0 = searcher.rnn.alpha.detach().clone(), searcher.rnn.w0.detach().clone()
    geno = searcher.run()
    assert torch.equal(searcher.rnn.alpha, alpha) and not torch.equal(searcher.rnn.w0, w0)
    assert geno.name == "frozen_search_seed3" and geno.provenance["method"] == "frozen"
    assert genotype.load(tmp_path / "run" / "genotype.json").nodes == geno.nodes
