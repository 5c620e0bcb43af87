"""Training runs of the tagger with flair's `ModelTrainer`, one run directory per seed.

Settings follow I-DARTS (Jiang et al. 2019 §3.2) / Akbik et al. 2019: SGD lr 0.1, batch 32 (the ESS paper used 24),
gradient clipping 5.0, lr × 0.25 after 2 epochs without dev improvement, stop when the lr falls
below 1e-4 or after `max_epochs`. `--optimizer adamw` keeps that schedule with AdamW (torch's
defaults: betas 0.9/0.999, weight decay 0.01); `--scheduler linear` is flair's `fine_tune` schedule
(warm-up, then linear decay to 0 at the last step: flair's `LinearSchedulerPlugin`), with the fine-tuned
transformer at its own `--embeddings-lr` (flair's `decoder_learning_rate` split: parameters named
`embeddings` take it, the head takes `--lr`). Why a run stopped is kept in metrics.json (`stopped`), the last
line of training.log and the card. `--precision bf16` runs each batch's forward pass
under bf16 autocast (`nas.common.runs.autocast`), its backward following it, while the weights,
the optimiser, evaluation and every saved model stay fp32. The best epoch on dev is tested (the final one with
`--train-with-dev`). Test scoring is ours (`evaluation`), so the trainer is given train and dev
only and does not score test a second time; the scores are those of the saved model file, loaded
afresh as `bin/evaluate` loads it (`_score_saved`).

A run checkpoints every epoch and resumes exactly (`resume`); a run that fails before its first
checkpoint removes its directory (`nas.common.runs`).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from nas.common.files import atomic_write_json, read_json
from nas.common.parameters import count_parameters
from nas.common.runs import Interrupted, RunDir

from . import evaluation, model_card
from .config import TaggerConfig
from .corpora import TaggingCorpus, to_sentences
from .embeddings import keep_word_vectors
from .pooled_memory import pool_memory

if TYPE_CHECKING:
    from nas.cells.genotype import Genotype

log = logging.getLogger("flair")
# flair 0.15's trainer builds torch.cuda.amp.GradScaler (deprecated by torch) on every training, CPU too.
GRAD_SCALER = r"`torch\.cuda\.amp\.GradScaler\(args\.\.\.\)` is deprecated"
warnings.filterwarnings("ignore", message=GRAD_SCALER, category=FutureWarning)


def tag_dictionary(corpus: TaggingCorpus):
    """flair span-label dictionary of every entity type in the corpus (sorted, so runs agree)."""
    from flair.data import Dictionary

    kinds = sorted({k for split in corpus.counts().values() if split for k in split["entities"]})
    dictionary = Dictionary(add_unk=False)
    for kind in kinds:
        dictionary.add_item(kind)
    dictionary.span_labels = True
    return dictionary


def build_model(config: TaggerConfig, corpus: TaggingCorpus, embeddings, genotype: Genotype | None, rnn=None):
    """The tagger of `config`; `rnn`, a module behind flair's `nn.LSTM` interface, replaces the
    genotype's layer (the tagger search passes its search layer; such a model trains but does not reload)."""
    from nas.fast.backends import attach, current
    from .model import CellTagger

    return attach(
        CellTagger(
            embeddings,
            tag_dictionary(corpus),
            corpus.tag_type,
            genotype=genotype,
            rnn=rnn,
            cell_dropout_x=config.dropout_x,
            cell_dropout_h=config.dropout_h,
            cell_init=config.cell_init,
            hidden_size=config.hidden_size,
            tag_format="BIOES" if config.train_scheme == "bioes" else "BIO",
            use_crf=True,
            reproject_embeddings=config.reproject,
            dropout=0.0,
            word_dropout=config.word_dropout,
            locked_dropout=config.locked_dropout,
        ),
        current(config.device),
    )


def optimizer_class(name: str):
    """The torch optimiser of `--optimizer` (`config.OPTIMIZERS`)."""
    import torch

    return {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[name]


@contextlib.contextmanager
def training_precision(model, device, precision: str):
    """While training, the model's `forward_loss` (what flair's trainer runs each batch) under autocast
    at `precision`; its backward follows the dtypes autocast chose. flair's own `use_amp` is not used:
    it is float16 with a GradScaler on a GPU. Prediction and evaluation (`predict`) are untouched, so
    they stay fp32, as do the weights; nothing of this is saved with the model."""
    from nas.common.runs import autocast

    if precision == "fp32":
        yield
        return
    forward_loss = model.forward_loss

    def under_autocast(*args, **kwargs):
        with autocast(device, precision):
            return forward_loss(*args, **kwargs)

    model.forward_loss = under_autocast
    try:
        yield
    finally:
        del model.forward_loss


class _EpochClock:
    """The times of a run's epochs, what they say of the time left, and the time budget's stop.

    The budget counts the wall-clock time since the first epoch started (training, dev evaluation,
    saving the best model). An epoch starts only if the mean epoch so far still fits, so a run stops
    before its budget rather than one epoch after; the first epoch always runs.
    """

    def __init__(self, time_budget: float | None, max_epochs: int | None):
        self.time_budget, self.max_epochs = time_budget, max_epochs
        self.train_seconds: list[float] = []
        self.epoch_seconds: list[float] = []
        self.stopped: str | None = None
        self._start = self._first = 0.0

    def start_epoch(self) -> bool:
        """Start an epoch's clock; False, with `stopped` saying why, when it would end past the time budget."""
        now = time.perf_counter()
        done, budget = len(self.epoch_seconds), self.time_budget
        if not self._first:  # the first epoch of this process: a resumed run has spent its earlier epochs' time
            self._first = now - sum(self.epoch_seconds)
        if done and budget is not None and (now - self._first) * (done + 1) / done > 60 * budget:
            self.stopped = f"time budget of {budget:g} minutes: the next epoch would end past it"
            return False
        self._start = now
        return True

    def time_left(self, record: logging.LogRecord) -> bool:
        """A logging filter: flair's `EPOCH n done: ...` line, with the time left appended."""
        message = record.getMessage()
        words = message.split(" ", 2)
        if (
            self.max_epochs is not None
            and len(words) == 3
            and words[0] == "EPOCH"
            and words[1].isdigit()
            and words[2].startswith("done:")
        ):
            record.msg, record.args = f"{message} - {self.estimate(int(words[1]))}", ()
        return True

    def estimate(self, epoch: int) -> str:
        """The time left after epoch `epoch`'s training (its dev evaluation still to come)."""
        now = time.perf_counter()
        train = [*self.train_seconds, now - self._start]  # this epoch's training has just ended
        evaluating = [full - part for full, part in zip(self.epoch_seconds, self.train_seconds)]
        per_epoch = _mean(train) + (_mean(evaluating) or 0.0)
        epochs = max(self.max_epochs - epoch, 0)
        left = epochs * per_epoch + (_mean(evaluating) or 0.0)
        if not epochs:
            return "last epoch"
        plural = "s" if epochs > 1 else ""
        said = f"time left at most ~{_duration(left)} ({epochs} epoch{plural} of ~{_duration(per_epoch)})"
        if self.time_budget is not None:
            budget_left = max(60 * self.time_budget - (now - self._first), 0.0)
            if budget_left < left:
                said = f"time left at most ~{_duration(budget_left)} (the time budget)"
        return said


def _epoch_plugin(notes: list[str], records_dev: bool, time_budget: float | None, max_epochs: int | None = None):
    """A trainer plugin that logs the corpus notes to training.log, times each epoch, keeps the dev F1
    of each epoch, and stops before an epoch that would end past `time_budget` minutes (`_EpochClock`).
    flair's line at the end of each epoch's training (`EPOCH 3 done: loss ...`) gets the time left: at
    most the epochs left to `max_epochs` at the mean epoch time so far (the annealing may stop sooner),
    or the time budget left if that is less.
    """
    from flair.trainers.plugins.base import TrainerPlugin, TrainingInterrupt

    class EpochPlugin(TrainerPlugin, _EpochClock):
        def __init__(self):
            TrainerPlugin.__init__(self)
            _EpochClock.__init__(self, time_budget, max_epochs)
            self.dev_f1: list[float] = []

        @TrainerPlugin.hook
        def after_setup(self, **kw):
            for note in notes:
                log.info(note)
            log.addFilter(self.time_left)

        @TrainerPlugin.hook("_training_finally")
        def remove_filter(self, **kw):
            log.removeFilter(self.time_left)

        @TrainerPlugin.hook
        def before_training_epoch(self, epoch, **kw):
            if not self.start_epoch():
                raise TrainingInterrupt(f"stopping before epoch {epoch}: {self.stopped}")

        @TrainerPlugin.hook
        def after_training_epoch(self, **kw):
            self.train_seconds.append(time.perf_counter() - self._start)

        @TrainerPlugin.hook
        def after_evaluation(self, validation_scores, **kw):
            self.epoch_seconds.append(time.perf_counter() - self._start)
            if records_dev:
                self.dev_f1.append(float(validation_scores[0]))

    return EpochPlugin()


class _OwnTestScoring(logging.Filter):
    """flair is given no test split (the test set is scored here, after training), so two of its log
    lines would mislead: the corpus line's "+ 0 test sentences", which is told the real test size,
    and "Test data not provided setting final score to 0", which is dropped."""

    def __init__(self, test_sentences: int):
        super().__init__()
        self.test_sentences = test_sentences

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Test data not provided"):
            return False
        if message.startswith("Corpus: ") and message.endswith(" + 0 test sentences"):
            record.msg, record.args = (
                (
                    message.removesuffix(" + 0 test sentences")
                    + f" sentences (+ {self.test_sentences} test sentences, scored after training)"
                ),
                (),
            )
        return True


def train_run(
    config: TaggerConfig,
    corpus: TaggingCorpus,
    embeddings,
    genotype: Genotype | None,
    seed: int,
    out: Path,
    resume: bool = False,
    on_epoch: Callable | None = None,
) -> dict:
    """Train one seed into `out` and return its metrics (also written to out/metrics.json).

    `resume`: continue from out/checkpoint.pt (from the start when there is none; a finished run
    only returns its metrics). `on_epoch` is called with the `resume.TrainingState` after each
    epoch's checkpoint.

    With `--device cuda` and several GPUs this is flair's own multi-GPU path: `launch_distributed`
    spawns one process per GPU and `ModelTrainer.train(multi_gpu=True)` wraps the model in DDP
    (the batch size is then per GPU); only the main process scores the test set and writes files.
    """
    import torch

    if resume and (out / "metrics.json").is_file():
        return read_json(out / "metrics.json")
    if config.device.startswith("cuda") and torch.cuda.device_count() > 1:
        from flair.distributed_utils import launch_distributed

        return launch_distributed(_train_run, config, corpus, embeddings, genotype, seed, out, True, resume, on_epoch)
    return _train_run(config, corpus, embeddings, genotype, seed, out, False, resume, on_epoch)


def _train_run(
    config: TaggerConfig,
    corpus: TaggingCorpus,
    embeddings,
    genotype: Genotype | None,
    seed: int,
    out: Path,
    multi_gpu: bool,
    resume: bool,
    on_epoch: Callable | None,
) -> dict:
    """`train_run` in this process (one of flair's GPU processes with `multi_gpu`): set up, train, and on the
    main process score the saved model and write the run's files."""
    import flair
    from flair.distributed_utils import is_main_process
    from flair.trainers import ModelTrainer

    from nas.fast.backends import current

    state = _begin_run(config, seed, out, multi_gpu, resume)
    train = to_sentences(corpus.train, corpus.tag_type)
    dev = to_sentences(corpus.dev, corpus.tag_type) if corpus.dev is not None else None
    test = to_sentences(corpus.test, corpus.tag_type)
    embeddings.to(flair.device)  # built where flair.device pointed then (the GPU, wherever one exists)
    states, states_notes = _charlm_states(embeddings, train + (dev or []) + test, config.charlm_states)
    scored_dev = dev if dev is not None and not config.train_with_dev else None  # dev trained on is not scored
    model = build_model(config, corpus, embeddings, genotype)
    untrained = _dev_f1_untrained(model, state, scored_dev, corpus, config.eval_batch_size)
    # The pooled-Flair memory the model trains and is selected on, saved with every model file (tagger.pooled_memory)
    memory = pool_memory(model, train + (dev or []), config.eval_batch_size)
    notes = [*corpus.notes, *states_notes, f"backend: {current(config.device).name}"]
    timer, schedule, keeper = _plugins(config, out, notes, state, scored_dev is not None, untrained, memory, on_epoch)
    trainer = ModelTrainer(model, _flair_corpus(corpus, train, dev))
    start = state["epoch"] if state is not None else 0
    _fit(trainer, config, out, start, (timer, schedule, keeper), len(corpus.test.tokens), multi_gpu)
    keeper.mark_best_complete()
    if not is_main_process():
        return {}
    metrics = _score_run(config, corpus, seed, out, model, test, scored_dev, untrained, states, timer, schedule)
    _record_run(out, config, genotype, metrics)
    return metrics


def _begin_run(config: TaggerConfig, seed: int, out: Path, multi_gpu: bool, resume: bool) -> dict | None:
    """Seed flair, set its device, and lay out `out`: the checkpoint to continue from (None: a fresh start),
    and its loss table cut to the epochs the checkpoint holds."""
    import flair
    import torch

    from . import resume as resuming

    if not multi_gpu:  # flair trains on flair.device, which flair sets to the GPU wherever one exists; the
        flair.device = torch.device(config.device)  # config's device decides (flair's GPU processes set their own)
    flair.set_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    run = RunDir(out)
    run.clean_temp_files()
    state = resuming.load_checkpoint(run) if resume else None
    resuming.trim_loss_table(out, state["epoch"] if state is not None else 0)
    return state


def _dev_f1_untrained(model, state: dict | None, scored_dev: list | None, corpus: TaggingCorpus, batch_size: int):
    """The dev F1 before any training (None without a scored dev split), or the checkpoint's, whose weights
    `model` takes."""
    if state is not None:
        model.load_state_dict(state["model"])
        return state["dev_f1_untrained"]
    if scored_dev is None:
        return None
    return evaluation.evaluate(model, scored_dev, corpus.dev.tags, batch_size)[0]["f1"]


def _plugins(config: TaggerConfig, out: Path, notes, state, scored_dev: bool, untrained, memory, on_epoch) -> tuple:
    """The trainer plugins of a run's own: the epoch clock (`_epoch_plugin`), the schedule (annealing on the dev
    F1, or flair's linear one) and the checkpoints and best model (`resume.TrainingState`)."""
    from flair.trainers.plugins.functional.anneal_on_plateau import AnnealingPlugin
    from flair.trainers.plugins.functional.linear_scheduler import LinearSchedulerPlugin

    from . import resume as resuming

    timer = _epoch_plugin(notes, scored_dev, config.time_budget, config.max_epochs)
    schedule = (
        LinearSchedulerPlugin(warmup_fraction=config.warmup_fraction)
        if config.scheduler == "linear"
        else AnnealingPlugin(
            base_path=out,
            min_learning_rate=config.min_lr,
            anneal_factor=config.anneal_factor,
            patience=config.patience,
            initial_extra_patience=0,
            anneal_with_restarts=False,
        )
    )
    keeper = resuming.TrainingState(
        out,
        schedule,
        timer,
        best_by_dev=scored_dev,
        keep_best=not config.train_with_dev,
        dev_f1_untrained=untrained,
        state=state,
        on_epoch=on_epoch,
        memory=memory,
    )
    return timer, schedule, keeper


def _flair_corpus(corpus: TaggingCorpus, train: list, dev: list | None):
    """flair's corpus of the train and dev sentences: the test split is scored after training (`_score_saved`)."""
    from flair.data import Corpus
    from flair.datasets import FlairDatapointDataset

    return Corpus(
        FlairDatapointDataset(train),
        FlairDatapointDataset(dev) if dev else None,
        None,
        name=corpus.train.path.parent.name,
        sample_missing_splits=False,
    )


def _fit(trainer, config: TaggerConfig, out: Path, start: int, plugins: tuple, tested: int, multi_gpu: bool) -> None:
    """flair's training from epoch `start` with the run's `plugins` (`_plugins`), flair's loss table, training.log
    and the TensorBoard curves; `tested`: the size of the test split, scored after training."""
    import flair
    from flair.trainers.plugins.loggers.loss_file import LossFilePlugin

    from . import resume as resuming

    timer, schedule, keeper = plugins
    if start:  # to stderr under the commands; AppendingLog marks training.log itself
        log.info(resuming.resumed_line(start))
    # in this order: the epoch's row of loss.tsv is written before TrainingState's checkpoint
    plugins = [
        timer,
        schedule,
        LossFilePlugin(out, epoch=start),
        resuming.AppendingLog(out / "training.log", start),
        keeper,
        *_live_curves(out),
    ]
    truthful = _OwnTestScoring(tested)
    log.addFilter(truthful)
    try:
        with (
            keeper.stop,
            _bars_on_terminals_only(),
            warnings.catch_warnings(),
            training_precision(trainer.model, flair.device, config.precision),
        ):
            warnings.filterwarnings(
                "ignore", message=GRAD_SCALER, category=FutureWarning
            )  # whatever filters the caller set
            trainer.train_custom(out, plugins=plugins, epoch=start, multi_gpu=multi_gpu, **_trainer_settings(config))
    except Interrupted as stop:
        _append_line(out / "training.log", f"stopped: interrupted ({stop}); continue with --resume")
        raise
    finally:
        log.removeFilter(truthful)


def _trainer_settings(config: TaggerConfig) -> dict:
    """flair's `train_custom` settings of `config`; flair's own final model, test scoring and log files are off,
    the run directory has its own."""
    return dict(
        # flair's split: the parameters named `embeddings` at learning_rate, the others at decoder_learning_rate
        learning_rate=config.embeddings_lr or config.lr,
        decoder_learning_rate=config.lr if config.embeddings_lr else None,
        mini_batch_size=config.batch_size,
        eval_batch_size=config.eval_batch_size,
        max_epochs=config.max_epochs,
        optimizer=optimizer_class(config.optimizer),
        max_grad_norm=config.clip,
        train_with_dev=config.train_with_dev,
        shuffle=True,
        save_final_model=False,
        use_final_model_for_eval=True,
        create_file_logs=False,
        create_loss_file=False,
    )


def _score_run(
    config: TaggerConfig,
    corpus: TaggingCorpus,
    seed: int,
    out: Path,
    model,
    test: list,
    scored_dev: list | None,
    untrained: float | None,
    states: dict | None,
    timer,
    schedule,
) -> dict:
    """The run's metrics: the saved model's test scores (its predictions written to test.conll) and dev scores,
    and what the training did."""
    saved = "best-model.pt" if (out / "best-model.pt").is_file() else "final-model.pt"
    report, pred, memory = _score_saved(out / saved, test, corpus.test.tags, config)
    evaluation.write_conll(out / "test.conll", corpus.test.tokens, corpus.test.tags, pred)
    metrics = {
        "seed": seed,
        "model": saved,
        "epochs": len(timer.train_seconds),
        "seconds_per_epoch": {
            "train": _mean(timer.train_seconds),
            "with_dev_evaluation": _mean(timer.epoch_seconds),
            "each_train": timer.train_seconds,
        },
        "dev_f1_untrained": untrained,
        "dev_f1_by_epoch": timer.dev_f1,
        "stopped": stop_reason(config, timer, schedule),
        "charlm_states": states,
        "rnn_parameters": count_parameters(model.rnn),
        "hidden_size": config.hidden_size,
        "test": report,
        "corpus": corpus.counts(),
    }
    if config.matched_to:
        metrics["matched_to"] = config.matched_to
    if memory is not None:
        metrics["pooled_memory"] = memory
    if scored_dev is not None:
        metrics["dev"] = _score_saved(out / saved, scored_dev, corpus.dev.tags, config)[0]
    return metrics


def _record_run(out: Path, config: TaggerConfig, genotype: Genotype | None, metrics: dict) -> None:
    """metrics.json, the model card and the end of training.log; a finished run resumes to its metrics alone: its
    checkpoint goes, and the final model unless asked for."""
    atomic_write_json(out / "metrics.json", metrics)
    model_card.write(
        out / "README.md",
        {**asdict(config), "genotype": genotype.to_dict() if genotype else None},
        metrics,
        metrics["model"],
        out,
    )
    table = evaluation.table(metrics["test"])
    _append_line(out / "training.log", f"TEST ({metrics['model']}, seqeval strict IOB2):\n{table}")
    _append_line(out / "training.log", f"stopped: {metrics['stopped']['said']}")
    RunDir(out).checkpoint.unlink(missing_ok=True)
    if metrics["model"] != "final-model.pt" and not config.save_final_model:
        (out / "final-model.pt").unlink(missing_ok=True)


def stop_reason(config: TaggerConfig, timer, schedule) -> dict:
    """Why the training ended: `reason` (max_epochs, min_lr, time_budget) and a sentence that says it."""
    epochs = len(timer.train_seconds)
    if timer.stopped:
        return {"reason": "time_budget", "after_epoch": epochs, "said": f"after epoch {epochs}: the {timer.stopped}"}
    rates = getattr(schedule, "current_learning_rate", None) or []
    if config.scheduler == "anneal" and epochs < config.max_epochs and any(lr < config.min_lr for lr in rates):
        return {
            "reason": "min_lr",
            "after_epoch": epochs,
            "said": f"after epoch {epochs}: the learning rate was annealed to {min(rates):.3g}, below --min-lr "
            f"{config.min_lr:g}",
        }
    return {"reason": "max_epochs", "after_epoch": epochs, "said": f"after epoch {epochs}: --max-epochs reached"}


def _append_line(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")


@contextlib.contextmanager
def _bars_on_terminals_only():
    """flair's progress bars (its dev evaluation's, each epoch) shown on a terminal only: in a file or a
    pipe that keeps stderr, flair's log and ours (training.log's lines) stay free of them."""
    from flair.file_utils import Tqdm

    flairs = Tqdm.__dict__["tqdm"]

    def tqdm(*args, **kwargs):
        if not kwargs.get("disable"):
            kwargs["disable"] = None  # tqdm's own rule: off where its stream is not a terminal
        return flairs.__func__(*args, **kwargs)

    Tqdm.tqdm = staticmethod(tqdm)
    try:
        yield
    finally:
        Tqdm.tqdm = flairs


def _score_saved(path: Path, sentences: list, gold: list[list[str]], config: TaggerConfig) -> tuple:
    """(report, predicted tags, pooled memory's size or None) of the model file at `path`, loaded
    afresh as `bin/evaluate` loads it, so that the run reports what its saved file scores.

    The model in memory at the end of training is not the saved one: flair has loaded the best
    epoch's weights into it, but its pooled-Flair memory is the last epoch's, and each prediction
    adds to that memory. Each split is scored from a fresh load, as `bin/evaluate --split` does."""
    from .model import load_for_prediction
    from .pooled_memory import memory_bytes, pooled_embeddings

    model = load_for_prediction(path, config.device)
    memory = (
        {"words": max(len(e.word_embeddings) for e in pooled_embeddings(model)), "bytes": memory_bytes(model)}
        if pooled_embeddings(model)
        else None
    )
    report, pred = evaluation.evaluate_saved(model, sentences, gold, config.eval_batch_size)
    return report, pred, memory


def _charlm_states(embeddings, sentences: list, folder: str | None) -> tuple[dict | None, list[str]]:
    """Install the frozen character LMs' state tables (`charlm_states`) holding every sentence of
    the corpus: what was computed and read and how long it took (None: no such LMs), and a line for training.log."""
    from .charlm_states import reuse_states

    start = time.perf_counter()
    reuse = reuse_states(embeddings, sentences, Path(folder) if folder else None)
    if not reuse.tables:
        return None, []
    seconds = time.perf_counter() - start
    where = f", {reuse.loaded} read from {folder}" if folder else ""
    return (
        {"computed": reuse.computed, "loaded": reuse.loaded, "seconds": seconds},
        [
            f"character-LM states of {len(reuse.tables)} LMs: {reuse.computed} sentence states computed in "
            f"{seconds:.1f} s{where}; every epoch reads them"
        ],
    )


def _live_curves(out: Path) -> list:
    """flair's TensorBoard plugin, writing out/tensorboard while training runs, when TensorBoard is
    installed (`tensorboard --logdir runs/` then shows every run's curves live)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - needs the tensorboard package
    except ImportError:
        return []
    from flair.trainers.plugins.loggers.tensorboard import TensorboardLogger

    return [TensorboardLogger(log_dir=str(out / "tensorboard"))]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _duration(seconds: float) -> str:
    """`0.4 s`, `48 s`, `12 min`, `3 h 05 min`: what a time-left estimate needs."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def train_runs(
    config: TaggerConfig,
    corpus: TaggingCorpus,
    embeddings,
    genotype: Genotype | None,
    out: Path,
    resume: bool = False,
    on_epoch: Callable | None = None,
) -> dict:
    """`config.runs` seeds from `config.seed`; with several, each in out/seed-S and a mean ± std summary.

    A fresh run writes out/config.json first; if it fails before any seed's first checkpoint, out
    is removed. `resume` continues each seed where it stopped (`train_run`). `config` is checked, and its
    settings left to the optimiser filled in (`TaggerConfig.check`)."""
    config.check()
    run = RunDir(out)
    if not resume:
        stored = genotype.to_dict() if genotype is not None else None
        run.start({**asdict(config), "genotype": stored, "corpus_notes": corpus.notes})
    words = (
        word
        for split in (corpus.train, corpus.dev, corpus.test)
        if split is not None
        for sentence in split.tokens
        for word in sentence
    )
    embeddings = keep_word_vectors(embeddings, words, config.word_vocab)
    try:
        return _train_seeds(config, corpus, embeddings, genotype, out, resume, on_epoch)
    except BaseException:
        if not resume and not any(out.glob("**/checkpoint.pt")) and not any(out.glob("**/metrics.json")):
            run.discard()
        raise


def _train_seeds(
    config: TaggerConfig,
    corpus: TaggingCorpus,
    embeddings,
    genotype: Genotype | None,
    out: Path,
    resume: bool,
    on_epoch: Callable | None,
) -> dict:
    if config.runs == 1:
        return train_run(config, corpus, embeddings, genotype, config.seed, out, resume, on_epoch)
    runs = [
        train_run(
            config, corpus, embeddings, genotype, config.seed + k, out / f"seed-{config.seed + k}", resume, on_epoch
        )
        for k in range(config.runs)
    ]
    summary = {
        "runs": [{"seed": r["seed"], "test_f1": r["test"]["f1"], "epochs": r["epochs"]} for r in runs],
        "test": evaluation.summarise([r["test"] for r in runs]),
        **{k: runs[0][k] for k in ("rnn_parameters", "hidden_size", "matched_to") if k in runs[0]},
    }
    atomic_write_json(out / "metrics.json", summary)
    return summary
