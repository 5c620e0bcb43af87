"""β-DARTS, DARTS− and SDARTS-RS (nas/methods/beta_darts.py, darts_minus.py, sdarts.py): each rule
against a hand computation, each method through bin/search-lm and bin/search-tagger at tiny sizes,
their settings as flags (refused for another method), stored in config.json and resumed."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

import tagger_data as td
from nas.cells import genotype
from nas.cells.ops import OPS
from nas.cells.search_cell import SearchRNN
from nas.cli.search_lm import main as search_lm
from nas.common.runs import Interrupted, RunDir
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus
from nas.methods.architect import Architect
from nas.lm.model import language_model_loss
from nas.methods.beta_darts import beta_decay
from nas.methods.darts_minus import SoftmaxWithSkip
from nas.cells.mixing import MixingRule
from nas.methods.scheduled import linear
from nas.methods.sdarts import perturbed
from nas.runs.config import SearchConfig
from nas.runs.search import Searcher
from tagger.cli.search_tagger import main as search_tagger

METHODS = ("beta-darts", "darts-minus", "sdarts-rs")
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
    "--hessian-iterations",
    "2",
]
IDENTITY = OPS.index("identity")


def searcher(lm_corpus, run_dir, method, epochs=3, **settings):
    paths = find_splits(lm_corpus)
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        method=method,
        emsize=12,
        nhid=12,
        nodes=3,
        batch_size=4,
        bptt=8,
        eval_batch_size=2,
        max_batches_per_epoch=6,
        lr=2.0,
        epochs=epochs,
        arch_lr=0.1,
        seed=2,
        hessian_iterations=2,
        method_settings=settings,
    )
    config.validate()
    run = RunDir(run_dir)
    run.start({})
    return Searcher(config, run, Corpus.load(paths))


# -- the rules by hand ---------------------------------------------------------------------


def test_linear_schedule_reaches_its_end_in_the_last_epoch():
    assert [linear(0.0, 50.0, e, 3) for e in range(3)] == [0.0, 25.0, 50.0]
    assert linear(1.0, 0.0, 0, 1) == 1.0  # a one-epoch search stays at the start


def test_beta_decay_value_and_gradient_by_hand():
    alpha = torch.zeros(2, 5)
    alpha[1, 0] = math.log(2.0)  # row 2: exp = (2, 1, 1, 1, 1)
    alpha.requires_grad_()
    loss = beta_decay(alpha)
    assert loss.item() == pytest.approx((math.log(5) + math.log(6)) / 2)
    loss.backward()
    expected = torch.tensor([[0.1] * 5, [2 / 12, 1 / 12, 1 / 12, 1 / 12, 1 / 12]])  # softmax(row) / 2 edges
    assert torch.allclose(alpha.grad, expected)


def test_beta_darts_alpha_loss_is_the_task_loss_plus_the_scheduled_regulariser(lm_corpus, tmp_path):
    s = searcher(lm_corpus, tmp_path, "beta-darts", beta_lambda_start=10.0, beta_lambda_end=30.0)
    architect = s.method.architects["all"]
    s.model.eval()  # no dropout: both losses see the same network
    words, targets = torch.randint(0, 10, (8, 4)), torch.randint(0, 10, (8, 4))
    params = {**dict(s.model.named_parameters()), **dict(s.model.named_buffers())}
    plain, _ = language_model_loss(s.model, params, (words, targets), s.model.init_hidden(4))
    for epoch, weight in ((0, 10.0), (1, 20.0), (2, 30.0)):
        s.method.epoch = epoch
        total, _ = architect.loss_fn(s.model, params, (words, targets), s.model.init_hidden(4))
        assert total.item() == pytest.approx(plain.item() + weight * beta_decay(s.rnn.alpha).item(), rel=1e-6)


def test_darts_minus_weights_with_beta_at_one_and_at_zero_by_hand():
    alpha = torch.tensor([[0.0, 0.0, math.log(3.0), 0.0, 0.0]])  # softmax: (1, 1, 3, 1, 1) / 7
    softmax = torch.tensor([[1, 1, 3, 1, 1]]) / 7.0
    rule = SoftmaxWithSkip(beta=1.0)
    assert torch.allclose(rule.normalise(alpha, [1]), softmax + F.one_hot(torch.tensor(IDENTITY), 5))
    # identity weighs most in the mixture (8/7), but the cell is derived from the softmax alone: tanh
    assert rule.derive(rule.normalise(alpha, [1]), [1]) == [[("tanh", 0)]]
    rule.beta = 0.0
    assert torch.allclose(rule.normalise(alpha, [1]), softmax)


class Fixed(MixingRule):
    """Mixing weights given outright."""

    def __init__(self, weights: torch.Tensor):
        self.weights = weights

    def normalise(self, alpha, layout):
        return self.weights


def test_darts_minus_mixed_output_is_the_mixture_plus_beta_times_the_identity_edge():
    """One step of a one-node cell is linear in the mixing weights (BatchNorm in eval mode at its initial
    statistics scales only), so with β on identity it is the softmax mixture's output plus β times the
    output of the identity edge alone; with β at 0 it is DARTS's."""
    torch.manual_seed(0)
    layer = SearchRNN(4, 4, 1, SoftmaxWithSkip(), 0.0, 0.0).eval()
    x = torch.randn(1, 2, 4)

    def output(rule):
        layer.rule = rule
        with torch.no_grad():
            return layer(x)[0]

    softmax = F.softmax(layer.alpha.detach(), -1)
    identity_alone = output(Fixed(F.one_hot(torch.tensor([IDENTITY]), len(OPS)).float()))
    assert identity_alone.abs().min() > 1e-4  # the skip changes every unit
    assert torch.allclose(output(SoftmaxWithSkip(beta=0.0)), output(Fixed(softmax)))
    assert torch.allclose(output(SoftmaxWithSkip(beta=1.0)), output(Fixed(softmax)) + identity_alone, atol=1e-6)
    assert torch.allclose(output(SoftmaxWithSkip(beta=0.5)), output(Fixed(softmax)) + 0.5 * identity_alone, atol=1e-6)


def test_sdarts_perturbation_by_hand():
    weights = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]])
    noise = torch.tensor([[0.1, -0.4, 0.05], [-0.25, -0.3, -0.7]])
    out = perturbed(weights, noise)
    assert torch.allclose(out[0], torch.tensor([0.6, 0.0, 0.25]) / 0.85)
    assert torch.equal(out[1], torch.tensor([1.0, 0.0, 0.0]))  # all clamped to 0: its largest perturbed op (−0.05)


def test_sdarts_weight_step_sees_perturbed_weights_within_epsilon_and_alpha_is_never_changed(lm_corpus, tmp_path):
    s = searcher(lm_corpus, tmp_path, "sdarts-rs", epsilon_start=0.1, epsilon_end=0.2)
    rule, seen = s.rnn.rule, []
    alpha_step = Architect.step

    def step(self, *args):
        assert rule.noise is None  # the α step sees the weights unperturbed
        out = alpha_step(self, *args)
        seen.append(s.rnn.alpha.detach().clone())
        return out

    Architect.step = step
    try:

        def check(searcher):  # after the weight step of each batch
            epsilon = [0.1, 0.15, 0.2][searcher.epoch]
            assert rule.noise is not None and rule.noise.abs().max() <= epsilon
            assert rule.noise.abs().max() > epsilon / 2  # drawn over the whole width (36 draws)
            assert torch.equal(searcher.rnn.alpha, seen[-1])  # α as the α step left it
            assert torch.allclose(searcher.rnn.mixing_weights(), perturbed(F.softmax(seen[-1], -1), rule.noise))

        s.run(on_batch=check)
    finally:
        Architect.step = alpha_step
    assert rule.noise is None and len(seen) == 18
    assert torch.equal(s.rnn.alpha, seen[-1])


# -- schedules over a search, and resuming ----------------------------------------------------


def test_darts_minus_beta_decays_from_its_start_to_zero_over_the_epochs(lm_corpus, tmp_path):
    s = searcher(lm_corpus, tmp_path, "darts-minus", aux_skip_start=0.8)
    betas = []
    s.run(on_batch=lambda searcher: betas.append((searcher.epoch, searcher.rnn.rule.beta)))
    assert sorted(set(betas)) == [(0, 0.8), (1, pytest.approx(0.4)), (2, 0.0)]


@pytest.mark.parametrize("method", METHODS)
def test_a_resumed_search_equals_an_uninterrupted_one(lm_corpus, tmp_path, method):
    """The epoch that moves the method's setting is in the checkpoint (and SDARTS's draws come from the saved RNG)."""
    whole = searcher(lm_corpus, tmp_path / "whole", method)
    whole.run()

    def stop_mid_second_epoch(s):
        if s.epoch == 1 and s.batch == 3:
            s.stop.request()

    cut = searcher(lm_corpus, tmp_path / "cut", method)
    with pytest.raises(Interrupted):
        cut.run(on_batch=stop_mid_second_epoch)
    paths = find_splits(lm_corpus)
    resumed = Searcher(cut.config, RunDir(tmp_path / "cut"), Corpus.load(paths))
    resumed.load_state(RunDir(tmp_path / "cut").load_checkpoint())
    resumed.run()
    assert torch.equal(resumed.rnn.alpha, whole.rnn.alpha) and torch.equal(resumed.rnn.w0, whole.rnn.w0)


# -- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, flags, settings",
    [
        ("beta-darts", ["--beta-lambda-end", "5"], {"beta_lambda_start": 0.0, "beta_lambda_end": 5.0}),
        ("darts-minus", ["--aux-skip-start", "0.5"], {"aux_skip_start": 0.5}),
        ("sdarts-rs", ["--epsilon-start", "0.05", "--epsilon-end", "0.1"], {"epsilon_start": 0.05, "epsilon_end": 0.1}),
    ],
)
def test_search_lm_runs_each_method_and_stores_its_settings(lm_corpus, tmp_path, method, flags, settings):
    run = tmp_path / "run"
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(lm_corpus),
            "--method",
            method,
            "--epochs",
            "2",
            "--arch-lr",
            "0.1",
            "--run-dir",
            str(run),
            "--out",
            str(tmp_path / "cell.json"),
            *TINY,
            *flags,
        ],
    )
    assert result.exit_code == 0, result.output
    stored = json.loads((run / "config.json").read_text())["method_settings"]
    assert stored == settings  # the flags given, the rest at the method's defaults
    cell = genotype.load(tmp_path / "cell.json")
    assert cell.provenance["method"] == method and cell.provenance["settings"]["method_settings"] == stored
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and log[0]["alpha"] != log[1]["alpha"]  # α moved
    assert all(math.isfinite(r["valid_ppl"]) and "eigenvalue" in r for r in log)
    # --resume goes on with the stored settings; typing one again with its value is no change
    result = CliRunner().invoke(search_lm, ["--resume", str(run), "--epochs", "3", *flags[:2]])
    assert result.exit_code == 0, result.output
    assert json.loads((run / "config.json").read_text())["method_settings"] == stored


def tiny_tagging_search(data, vectors, method: str, run):
    """bin/search-tagger with `method` for 2 epochs of 3 batches at the smallest size, into `run`."""
    flags = "--corpus conll03 --hidden-size 8 --nodes 3 --batch-size 8 --epochs 2 --max-batches-per-epoch 3"
    flags += " --hessian-iterations 2"  # as the LM searches here: the eigenvalue logged, at a tenth of the cost
    return CliRunner().invoke(
        search_tagger,
        [
            *flags.split(),
            "--data",
            str(data),
            "--embeddings",
            f"glove:{vectors}",
            "--method",
            method,
            "--arch-lr",
            "0.1",
        ]
        + ["--run-dir", str(run)],
    )


def test_search_tagger_runs_each_method(tmp_path, restore_flair_logging):
    td.write_conll03(tmp_path / "data")
    vectors = td.write_vectors(tmp_path / "vectors.txt")
    for method in METHODS:
        run = tmp_path / method
        result = tiny_tagging_search(tmp_path / "data", vectors, method, run)
        assert result.exit_code == 0, (method, result.output)
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in log] == [1, 2] and log[0]["alpha"] != log[1]["alpha"]
        config = json.loads((run / "config.json").read_text())
        assert (
            config["method_settings"]
            == {
                "beta-darts": {"beta_lambda_start": 0.0, "beta_lambda_end": 50.0},
                "darts-minus": {"aux_skip_start": 1.0},
                "sdarts-rs": {"epsilon_start": 0.03, "epsilon_end": 0.3},
            }[method]
        )
        assert genotype.load(run / "genotype.json").provenance["method"] == method


@pytest.mark.parametrize("command", ["lm", "tagger"])
@pytest.mark.parametrize(
    "flags, says",
    [
        (["--method", "darts", "--epsilon-end", "0.2"], "--epsilon-end: only with --method sdarts-rs"),
        (["--method", "beta-darts", "--aux-skip-start", "0.5"], "--aux-skip-start: only with --method darts-minus"),
        (["--method", "sdarts-rs", "--epsilon-end", "2"], "--epsilon-end: must be in [0, 1], got 2.0"),
        (["--method", "beta-darts", "--beta-lambda-end", "-1"], "--beta-lambda-end: must be non-negative, got -1.0"),
    ],
)
def test_a_method_setting_that_does_not_fit_is_one_line(
    lm_corpus, tmp_path, command, flags, says, restore_flair_logging
):
    if command == "lm":
        result = CliRunner().invoke(search_lm, ["--data", str(lm_corpus), "--run-dir", str(tmp_path / "run"), *flags])
    else:
        result = CliRunner().invoke(
            search_tagger,
            [
                "--corpus",
                "conll03",
                "--data",
                str(tmp_path / "data"),
                "--embeddings",
                "glove:x",
                "--run-dir",
                str(tmp_path / "run"),
                *flags,
            ],
        )
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and says in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("epsilon_end", 3.0, "must be in [0, 1], got 3.0"),
        ("epsilon_end", "0.1", "must be a number, got '0.1'"),
        ("beta_lambda_end", 5.0, "not a setting of this method"),
    ],
)
def test_a_stored_setting_that_does_not_fit_names_the_file(lm_corpus, tmp_path, name, value, says):
    run = tmp_path / "run"
    result = CliRunner().invoke(
        search_lm, ["--data", str(lm_corpus), "--method", "sdarts-rs", "--epochs", "1", "--run-dir", str(run), *TINY]
    )
    assert result.exit_code == 0, result.output
    config = json.loads((run / "config.json").read_text())
    config["method_settings"][name] = value
    (run / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(search_lm, ["--resume", str(run), "--epochs", "2"])
    assert result.exit_code == 2
    assert result.stderr == f"error: {run / 'config.json'}: setting {name!r}: {says}\n"


def test_a_run_stored_before_method_settings_resumes(lm_corpus, tmp_path):
    """A config.json of the flat SearchConfig fields alone (as runs stored them before method_settings) resumes."""
    run = tmp_path / "run"
    assert (
        CliRunner()
        .invoke(search_lm, ["--data", str(lm_corpus), "--epochs", "1", "--run-dir", str(run), *TINY])
        .exit_code
        == 0
    )
    config = json.loads((run / "config.json").read_text())
    del config["method_settings"]
    (run / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(search_lm, ["--resume", str(run), "--epochs", "2"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["epoch"] for line in (run / "log.jsonl").read_text().splitlines()] == [1, 2]


def test_config_of_a_run_gives_its_method_settings_and_a_flag_overrides_one(lm_corpus, tmp_path):
    first = tmp_path / "first"
    assert (
        CliRunner()
        .invoke(
            search_lm,
            [
                "--data",
                str(lm_corpus),
                "--method",
                "beta-darts",
                "--beta-lambda-end",
                "5",
                "--epochs",
                "1",
                "--run-dir",
                str(first),
                *TINY,
            ],
        )
        .exit_code
        == 0
    )
    for flags, expected in (([], 5.0), (["--beta-lambda-end", "7"], 7.0)):
        run = tmp_path / f"again{len(flags)}"
        result = CliRunner().invoke(
            search_lm, ["--config", str(first / "config.json"), "--data", str(lm_corpus), "--run-dir", str(run), *flags]
        )
        assert result.exit_code == 0, result.output
        stored = json.loads((run / "config.json").read_text())
        assert stored["method"] == "beta-darts" and stored["method_settings"]["beta_lambda_end"] == expected


@pytest.mark.parametrize("method", ["darts-minus", "sdarts-rs"])
def test_a_resumed_tagging_search_equals_an_uninterrupted_one(tmp_path, method):
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.tagging_search import TaggingSearch
    from tagger.tagging_search_config import TaggingSearchConfig

    td.write_conll03(tmp_path / "data")
    config = TaggingSearchConfig(
        corpus="conll03",
        data=str(tmp_path / "data"),
        embeddings=f"glove:{td.write_vectors(tmp_path / 'vectors.txt')}",
        hidden_size=8,
        nodes=3,
        batch_size=8,
        epochs=3,
        max_batches_per_epoch=3,
        seed=4,
        method=method,
        hessian_iterations=2,
    )
    corpus, embeddings = load_corpus("conll03", tmp_path / "data"), build_embeddings(config.embeddings)
    whole = TaggingSearch(config, RunDir(tmp_path / "whole"), corpus, embeddings)
    whole.start()
    expected = whole.run()

    def stop_in_second_epoch(s):
        if s.epoch == 1 and s.batch == 1:
            s.stop.request()

    cut = TaggingSearch(config, RunDir(tmp_path / "cut"), corpus, embeddings)
    cut.start()
    with pytest.raises(Interrupted):
        cut.run(on_batch=stop_in_second_epoch)
    resumed = TaggingSearch(config, RunDir(tmp_path / "cut"), corpus, embeddings)
    resumed.resume()
    assert resumed.run() == expected
    assert torch.equal(resumed.layer.cell.alpha, whole.layer.cell.alpha)
