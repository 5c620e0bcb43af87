"""`bin/train-tagger`: train a BiRNN-CRF tagger whose recurrent layer is a searched cell (or an LSTM)."""

from __future__ import annotations

import json
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nas.common.cli import (
    DEVICE,
    RUN_FOLDER,
    SEED_VALUE,
    check_resume_flags,
    command,
    command_line,
    config_option,
    defaults_option,
    flag_types,
    gemm_option,
    backend_option,
)
from nas.common.errors import InputError
from nas.common.files import read_json
from nas.common.ranges import check_ranges, check_stored
from nas.common.presets import preset_values, presets_help

from nas.common.devices import PRECISIONS

from ..config import (
    CELL_INITS,
    FINE_TUNE,
    MAX_EPOCHS,
    OPTIMIZERS,
    SCHEDULERS,
    SGD_LR,
    WARMUP_FRACTION,
    TaggerConfig,
)
from ..corpus_formats import FORMATS
from ..embeddings import POOLINGS
from ..tag_schemes import SCHEMES

if TYPE_CHECKING:
    from nas.cells.genotype import Genotype

    from ..training import Trained

D = TaggerConfig()
T = flag_types(TaggerConfig.RANGES)
# Settings a config.json written before their flag existed lacks, read as the values such a run ran with
OLDER_RUNS = {
    "word_vocab": 0,
    "gemm": "auto",
    "backend": "auto",  # word_vocab 0: every word vector was kept
    "optimizer": "sgd",
    "precision": "fp32",
    "fine_tune_embeddings": False,
    "scheduler": "anneal",
    "embeddings_lr": None,
    "warmup_fraction": None,
}


@command()
@defaults_option("--preset", lookup=lambda name: preset_values(name, "train-tagger"), help=presets_help("train-tagger"))
@click.option(
    "--cell",
    default=D.cell,
    help="Genotype JSON file, a shipped cell name (darts_v2, ...), or lstm for flair's BiLSTM-CRF.",
)
@click.option(
    "--corpus",
    type=click.Choice([*FORMATS, "column"]),
    help="Corpus format; column: any column file, see --columns.  [required]",
)
@click.option(
    "--data",
    type=click.Path(),
    help="Directory with the corpus files (eng.train/testa/testb, "
    "wnut17train.conll/emerging.dev.conll/emerging.test.annotated, train.txt/test.txt, or *train*/*dev*/*test* "
    "for column).  [required]",
)
@click.option("--columns", help="column corpus: INDEX:NAME items, e.g. 0:text,3:ner [default: 0:text,1:ner].")
@click.option(
    "--tag-column",
    help="Which named column holds the tags to learn [default: ner; chunk for conll2000; the only tag column for "
    "column].",
)
@click.option(
    "--tag-scheme", type=click.Choice(SCHEMES), help="Tag scheme of the files [default: iob1 for conll03, else iob2]."
)
@click.option(
    "--train-scheme",
    type=click.Choice(["bioes", "iob2"]),
    default=D.train_scheme,
    help="Tags the CRF learns (evaluation is always on IOB2 spans).",
)
@click.option(
    "--embeddings",
    default=D.embeddings,
    help="Comma-separated glove:PATH_OR_NAME, flair:FWD:BWD, pooled-flair:FWD:BWD, transformer:DIR_OR_ID; a "
    "character LM is a .pt file, a shipped name (wt2-forward) or flair's (news-forward), a transformer a model "
    "directory or a Hugging Face id (bert-base-cased): names come from flair's and Hugging Face's caches and "
    "downloads (none with HF_HUB_OFFLINE=1).",
)
@click.option("--pooling", type=click.Choice(POOLINGS), default=D.pooling, help="Pooling of pooled-flair embeddings.")
@click.option(
    "--charlm-states",
    type=click.Path(file_okay=False),
    help="A folder for the character LMs' states of the corpus's sentences: computed once before training and reused "
    "by every epoch; saved there, so later runs on the corpus with the same LMs (other seeds and cells) read them "
    "instead [default: kept in memory for this run only].",
)
@click.option(
    "--hidden-size",
    type=T["hidden_size"],
    default=D.hidden_size,
    help="Hidden units per direction (with --cell lstm --match-params CELL: CELL's).",
)
@click.option(
    "--match-params",
    help="Equal parameters: with --cell lstm, a cell (darts_v2, FILE) whose recurrent layer at --hidden-size the "
    "LSTM's matches; with a cell, lstm:H, the LSTM of hidden size H the cell's layer matches. The hidden size is "
    "chosen, the two counts printed and kept in metrics.json.",
)
@click.option(
    "--locked-dropout",
    type=T["locked_dropout"],
    default=D.locked_dropout,
    help="Locked (variational) dropout on the RNN input and output.",
)
@click.option("--word-dropout", type=T["word_dropout"], default=D.word_dropout)
@click.option("--dropout-x", type=T["dropout_x"], default=D.dropout_x, help="Variational dropout on x inside the cell.")
@click.option("--dropout-h", type=T["dropout_h"], default=D.dropout_h, help="Variational dropout on h inside the cell.")
@click.option(
    "--cell-init",
    type=click.Choice(CELL_INITS),
    default=D.cell_init,
    help="How the cell's weights start: lstm, uniform in ±1/√hidden as flair's LSTM; darts, ±0.04 as the DARTS code.",
)
@click.option(
    "--reproject/--no-reproject",
    default=D.reproject,
    help="A linear layer on the embeddings before the RNN (flair's reprojection).",
)
@click.option(
    "--word-vocab",
    type=T["word_vocab"],
    default=D.word_vocab,
    show_default=True,
    help="Word vectors the model keeps: those of every word of the corpus (as flair looks words up, so training and "
    "scores are the same as with all of them) and of this many first words of the vector file, its most frequent; "
    "other words tagged later get the unknown-word vector. 0: keep all (GloVe 6B: 400,000 words, 80 MB at 50d).",
)
@click.option(
    "--save-final-model",
    is_flag=True,
    help="Keep final-model.pt (the last epoch's model) beside best-model.pt; without it only the model tested is kept.",
)
@click.option(
    "--optimizer",
    type=click.Choice(OPTIMIZERS),
    help="sgd: plain SGD as the papers; adamw: AdamW (weight decay 0.01), which wants a much smaller --lr, given "
    "explicitly: e.g. 5e-3 (--lr below --min-lr: lower --min-lr too) [default: sgd; adamw with "
    "--fine-tune-embeddings].",
)
@click.option(
    "--lr",
    type=T["lr"],
    help="Learning rate of the model, or of the tagger's head when --embeddings-lr is the transformer's [default: "
    f"{SGD_LR:g}, the papers' SGD; {FINE_TUNE['lr']:g} with --fine-tune-embeddings and AdamW].",
)
@click.option(
    "--embeddings-lr",
    type=T["embeddings_lr"],
    help="With --fine-tune-embeddings: the transformer's own learning rate, as flair's fine_tune sets it [default: "
    f"{FINE_TUNE['embeddings_lr']:g} with AdamW, flair's; --lr with SGD].",
)
@click.option(
    "--scheduler",
    type=click.Choice(SCHEDULERS),
    help="anneal: lr × --anneal-factor after --patience epochs without dev improvement, stop below --min-lr (the "
    "papers, flair's train); linear: warm-up over --warmup-fraction of the steps, then linear decay to 0 at the "
    "last step of --max-epochs (flair's fine_tune) [default: anneal; linear with --fine-tune-embeddings].",
)
@click.option(
    "--warmup-fraction",
    type=T["warmup_fraction"],
    help=f"--scheduler linear: the fraction of all steps the lr rises over [default: {WARMUP_FRACTION:g}, flair's].",
)
@click.option("--batch-size", type=T["batch_size"], default=D.batch_size)
@click.option("--eval-batch-size", type=T["eval_batch_size"], default=D.eval_batch_size)
@click.option(
    "--max-epochs",
    type=T["max_epochs"],
    help=f"Epochs at most [default: {MAX_EPOCHS} (the annealing usually stops sooner); {FINE_TUNE['max_epochs']} "
    "with --scheduler linear, flair's fine_tune].",
)
@click.option(
    "--anneal-factor",
    type=T["anneal_factor"],
    default=D.anneal_factor,
    help="--scheduler anneal: lr factor after --patience epochs without dev improvement.",
)
@click.option(
    "--patience",
    type=T["patience"],
    default=D.patience,
    help="--scheduler anneal: after more than this many epochs in a row without a better dev F1 (a tie broken by a "
    "lower dev loss, as flair does), the lr is multiplied by --anneal-factor; the training stops once it falls below "
    "--min-lr (flair's early stopping: there is no other).",
)
@click.option(
    "--min-lr",
    type=T["min_lr"],
    default=D.min_lr,
    help="--scheduler anneal: the training stops when the annealed lr falls below this (metrics.json's stopped says "
    "why a run ended).",
)
@click.option("--clip", type=T["clip"], default=D.clip, help="Gradient norm clipping.")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=D.precision,
    help="bf16: each batch's forward pass under torch.autocast (bf16 matmuls, fp32 weights and optimiser; CPUs with "
    "AVX512-BF16/AMX and GPUs); evaluation and the saved model stay fp32.",
)
@click.option(
    "--fine-tune-embeddings",
    is_flag=True,
    help="Train the transformer: embeddings' weights with the tagger (features only without it); the saved model holds "
    "the tuned transformer. Far slower on a CPU.",
)
@click.option("--train-with-dev", is_flag=True, help="Train on train+dev and test the final model.")
@click.option(
    "--time-budget",
    type=float,
    help="Minutes per run: no epoch starts that, at the mean epoch time so far, would end past it (the first always "
    "runs).",
)
@click.option("--seed", type=SEED_VALUE, default=D.seed, help="Seed of the first run (and of the sampled dev split).")
@click.option(
    "--runs", type=T["runs"], default=D.runs, help="Train this many seeds (seed, seed+1, ...) and report mean ± std."
)
@click.option("--device", type=DEVICE, default=D.device)
@click.option(
    "--threads",
    type=T["threads"],
    default=None,
    help="CPU threads for torch [default: torch's choice]; 1 is often fastest for small models on a busy machine.",
)
@gemm_option()
@backend_option()
@click.option("--run-dir", type=RUN_FOLDER, help="Run directory [default: runs/tagger-<time>].")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Load and check everything and build the model; print its parameter count (stderr) and the "
    "sentence/token/entity counts as JSON, and exit.",
)
@click.option(
    "--resume",
    type=click.Path(file_okay=False),
    help="Continue the interrupted training in this run directory (its config.json is reused); it ends with the model "
    "an uninterrupted run would.",
)
@config_option("bin/train-tagger", known=[*(f.name for f in fields(TaggerConfig)), "genotype", "corpus_notes"])
def main(run_dir, dry_run, resume, **options) -> None:
    """Train a BiRNN-CRF tagger whose recurrent layer is a frozen searched cell.

    Example, DARTS_V2 on CoNLL-2000 chunking with the packaged GloVe vectors (a short run):

    \b
        bin/train-tagger --cell darts_v2 --corpus conll2000 --data data/conll2000 --embeddings glove:glove-6b-50d --hidden-size 128 --max-epochs 2 --run-dir runs/chunk-darts
    """  # noqa: E501 (example command lines stay whole, to copy)
    from nas.common.runs import Interrupted, RunDir, default_run_dir

    genotype = None
    if resume:
        run = RunDir(resume)
        run.config()  # a folder that holds no run is said so, and not locked
        run.lock()  # the one writer of the run from here on, before anything is written: a second resume is refused
        config, genotype = _resumed(run)
        run_dir = Path(resume)
        changed = check_resume_flags(
            run_dir, run.config(), changeable=("max_epochs", "time_budget"), defaults=OLDER_RUNS
        )
        if changed:  # the limits it now goes on to, in config.json from its first checkpoint, as search-lm's
            config = replace(config, **changed)
            run.defer_config({**run.config(), **changed})
    else:
        _require("corpus", "data")
        settings = {f.name: options[f.name] for f in fields(TaggerConfig) if f.name in options}
        config = TaggerConfig(
            **{**settings, **_follow_the_typed_optimizer()},
            command=command_line("bin/train-tagger"),
        )
        run_dir = Path(run_dir) if run_dir else default_run_dir("tagger")
    from ..evaluation import summary_table, table
    from ..training import run_training  # what tagger.train_tagger runs too

    given = click.get_current_context().get_parameter_source("hidden_size") == click.core.ParameterSource.COMMANDLINE
    try:
        trained = run_training(
            config,
            run_dir,
            resume=bool(resume),
            genotype=genotype,
            dry_run=dry_run,
            hidden_size_given=given,
            say=lambda line: click.echo(line, err=True),
        )
    except Interrupted as stop:
        click.echo(f"interrupted: {stop}; continue with --resume {run_dir}", err=True)
        sys.exit(130)
    if dry_run:
        click.echo(json.dumps(trained.corpus.counts()))
        return
    click.echo(report_heading(trained))
    click.echo(table(trained.metrics["test"]) if config.runs == 1 else summary_table(trained.metrics["test"]))


def _follow_the_typed_optimizer() -> dict:
    """The settings a --config file or --preset filled that follow an optimiser (or fine-tuning) other than the one
    typed, unset (None) so that the config resolves them for the typed one: an SGD run's lr 0.1 is not AdamW's."""
    ctx = click.get_current_context()
    filled, command_line = ctx.default_map or {}, click.core.ParameterSource.COMMANDLINE
    before = {"optimizer": "sgd", "fine_tune_embeddings": False}  # what a file or preset without them ran with
    if not any(
        ctx.get_parameter_source(name) == command_line and str(filled.get(name, was)) != str(ctx.params[name])
        for name, was in before.items()
    ):
        return {}
    return {
        name: None
        for name in ("optimizer", "lr", "embeddings_lr", "scheduler", "warmup_fraction", "max_epochs")
        if ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT_MAP
    }


def _require(*names: str) -> None:
    """Options needed unless --resume (or --config) gives them: click's own error when missing."""
    ctx = click.get_current_context()
    for param in ctx.command.params:
        if param.name in names and ctx.params[param.name] is None:
            raise click.MissingParameter(ctx=ctx, param=param)


def _resumed(run) -> tuple[TaggerConfig, Genotype | None]:
    """The settings and genotype of the interrupted run in `run`."""
    stored = run.config()
    if "embeddings" not in stored:
        from nas.runs.config import command_of

        other = command_of(stored)
        whose = f" (the config of a {other} run: continue it with {other} --resume {run.path})" if other else ""
        raise InputError(f"{run.path / 'config.json'}: not a run of bin/train-tagger{whose}")
    if (run.path / "metrics.json").exists():
        raise InputError(f"{run.path}: the training is finished (metrics.json); nothing to resume")
    for name, value in OLDER_RUNS.items():  # a run started before the flag existed
        stored.setdefault(name, value)
    check_stored(TaggerConfig, stored, str(run.path / "config.json"), TaggerConfig.CHOICES)  # field by field, first
    try:
        config = TaggerConfig(**{f.name: stored[f.name] for f in fields(TaggerConfig) if f.name in stored})
    except TypeError as err:
        raise InputError(f"{run.path / 'config.json'}: {err}") from None
    check_ranges(config, TaggerConfig.RANGES, lambda name: f"{run.path / 'config.json'}: setting {name!r}")
    if stored.get("genotype") is None:
        return config, None
    from nas.cells.genotype import validate

    return config, validate(stored["genotype"], f"{run.path / 'config.json'} genotype")


def report_heading(trained: Trained) -> str:
    """The line above the test report: the split, its size, the model file scored."""
    test, metrics, out = trained.corpus.test, trained.metrics, trained.run_dir
    if trained.config.runs == 1:
        tested = metrics["model"]
    else:
        seeds = [run["seed"] for run in metrics["runs"]]
        models = sorted({read_json(out / f"seed-{seed}" / "metrics.json")["model"] for seed in seeds})
        tested = (
            f"{' or '.join(models)} of {len(seeds)} runs (seeds {', '.join(map(str, seeds))}), mean ± std over the runs"
        )
    return f"test split ({test.path.name}, {len(test.tokens):,} sentences), {tested}, seqeval strict IOB2:"


if __name__ == "__main__":
    main()
