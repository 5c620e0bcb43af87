"""`bin/search-tagger`: search a recurrent cell on a tagging corpus (I-DARTS's NER search) and write its genotype."""

from __future__ import annotations

import copy
from pathlib import Path

import click

from nas.common.cli import (
    COUNT,
    EPOCH_COUNT,
    NODE_COUNT,
    NON_NEGATIVE_COUNT,
    OUTPUT_FILE,
    RUN_FOLDER,
    SEED_VALUE,
    bounded,
    check_resume_flags,
    command,
    command_line,
)
from nas.common.errors import InputError
from nas.common.ranges import FACTOR, MINUTES, NON_NEGATIVE, POSITIVE
from nas.cli import search_lm
from nas.cli.method_flags import chosen_settings, take_method_settings
from nas.methods import METHODS, check_method_flags, method_setting_names
from . import train_tagger

from ..tagging_search_config import HEALTH_SETTINGS, METHOD_SETTINGS, TaggingSearchConfig

D = TaggingSearchConfig()
# bin/train-tagger's flags that the search takes with the same meaning (its defaults are D's)
TAGGER_FLAGS = (
    "corpus",
    "data",
    "columns",
    "tag_column",
    "tag_scheme",
    "train_scheme",
    "embeddings",
    "pooling",
    "hidden_size",
    "locked_dropout",
    "word_dropout",
    "dropout_x",
    "dropout_h",
    "reproject",
    "lr",
    "batch_size",
    "eval_batch_size",
    "clip",
    "device",
    "threads",
    "gemm",
    "backend",
)
REQUIRED = ("corpus", "data")  # required unless --resume


def tagger_flags(command: click.Command) -> click.Command:
    """Give `command` train-tagger's own TAGGER_FLAGS, first, with the search's defaults; none is
    required, since `--resume` reads them from the run directory."""
    given = {param.name: param for param in train_tagger.main.params}
    shared = []
    for name in TAGGER_FLAGS:
        flag = copy.copy(given[name])
        flag.required, flag.default = False, None if name in REQUIRED else getattr(D, name)
        shared.append(flag)
    command.params[:0] = shared
    return command


def method_flags(command: click.Command) -> click.Command:
    """Give `command` bin/search-lm's own flags of the search's health (HEALTH_SETTINGS) and of the methods'
    settings (METHOD_SETTINGS, and those the methods declare, `nas.methods.settings`), last; they default
    to None, so a flag given for another method is refused by name."""
    given = {param.name: param for param in search_lm.main.params}
    command.params.extend(
        copy.copy(given[name]) for name in (*HEALTH_SETTINGS, *METHOD_SETTINGS, *method_setting_names())
    )
    return command


@tagger_flags
@method_flags
@command()
@click.option(
    "--method",
    type=click.Choice(list(METHODS)),
    default=D.method,
    help="; ".join(f"{name}: {m.summary}" for name, m in METHODS.items()) + ". ESS counts its rounds as --epochs.",
)
@click.option(
    "--order",
    type=click.Choice(["1", "2"]),
    default=None,
    help="1: first-order α step; 2: unrolled step with a finite-difference Hessian-vector product [default: "
    f"{D.order}].",
)
@click.option(
    "--arch-split",
    type=bounded(FACTOR),
    default=D.arch_split,
    help="Fraction of the training sentences held apart for the α step (the weights train on the rest; dev is only "
    "scored, test never used).",
)
@click.option(
    "--epochs",
    type=EPOCH_COUNT,
    default=None,
    help=f"Search epochs (with --resume: the new total) [default: {D.epochs}].",
)
@click.option("--nodes", type=NODE_COUNT, default=D.nodes, help="Intermediate nodes of the cell.")
@click.option("--arch-lr", type=bounded(POSITIVE), default=D.arch_lr, help="Adam learning rate of α.")
@click.option("--arch-wdecay", type=bounded(NON_NEGATIVE), default=D.arch_wdecay, help="Adam weight decay of α.")
@click.option("--max-batches-per-epoch", type=COUNT, default=None, help="Cap the batches of an epoch (quick runs).")
@click.option(
    "--time-budget",
    type=bounded(MINUTES),
    default=None,
    help="Minutes of training and validation, summed over resumes; the epoch running when it ends is cut short and "
    "validated.",
)
@click.option(
    "--max-rollbacks",
    type=NON_NEGATIVE_COUNT,
    default=D.max_rollbacks,
    help="Rollbacks to the last checkpoint after a non-finite loss before giving up.",
)
@click.option(
    "--seed",
    type=SEED_VALUE,
    default=D.seed,
    help="Seed of the weights, the held-apart sentences, the batch order (and of a sampled dev split).",
)
@click.option(
    "--out", type=OUTPUT_FILE, help="Where to write the derived genotype JSON (default RUN_DIR/genotype.json)."
)
@click.option("--run-dir", type=RUN_FOLDER, help="Run directory [default: runs/search-tagger-<time>].")
@click.option(
    "--resume",
    type=click.Path(file_okay=False),
    help="Continue the search in this run directory (its config is reused).",
)
def main(out, run_dir, resume, epochs, time_budget, order, **options) -> None:
    """Search a recurrent cell as the BiRNN layer of the CRF tagger, on the tagging corpus itself.

    The loop is bin/search-lm's, with the training sentences held apart (--arch-split) as the split α
    learns on. Each epoch logs the train loss, the dev F1, the held-apart perplexity and the search's
    health: the dominant eigenvalue of the Hessian in α of the held-apart CRF loss per token
    (--hessian-iterations); --early-stop hessian stops by DARTS-ES and derives the cell from α of the
    window's start, --early-stop converged stops once the convergence rule holds
    (docs/concepts/search-health.md).

    Example, a short first-order I-DARTS search on CoNLL-2000 chunking, then a tagger on the found cell:

    \b
        bin/search-tagger --corpus conll2000 --data data/conll2000 --embeddings glove:glove-6b-50d --method idarts --hidden-size 32 --nodes 4 --epochs 2 --max-batches-per-epoch 40 --out chunk-cell.json

        bin/train-tagger --cell chunk-cell.json --corpus conll2000 --data data/conll2000
    """  # noqa: E501 (example command lines stay whole, to copy)
    from nas.cells.genotype import save
    from nas.cli.terminal import Terminal, run_loop
    from nas.runs.health import summary_lines
    from nas import speed
    from tagger.cli.runtime import flair_logs_to_stderr, use_device

    from ..tagging_search import TaggingSearch

    run, config = (
        _resumed(resume, epochs, time_budget) if resume else _fresh(run_dir, epochs, time_budget, order, options)
    )
    flair_logs_to_stderr()
    use_device(config.device, config.threads)
    config.gemm = speed.resolve_gemm(config.gemm)  # a fresh run records what auto resolved to; a resumed one its own
    config.backend = speed.resolve(config.backend, config.device)  # the same (the run's backend: speed.of)
    search = TaggingSearch.open(config, run, bool(resume))
    click.echo(f"run directory: {run.path} (backend {config.backend})", err=True)
    genotype = run_loop(
        search,
        Terminal(
            lambda s: f"search epoch {s.epoch + 1}/{config.epochs}",
            lambda s, r: (
                f"epoch {r['epoch']}: train loss {r['train_loss']:.3f}  dev F1 {100 * r['dev_f1']:.2f}  "
                + (f"λmax {r['eigenvalue']:.3g}  " if "eigenvalue" in r else "")
                + f"{r['tokens_per_s']:,.0f} tok/s  genotype {r['genotype']}"
            ),
        ),
    )
    target = Path(out) if out else run.path / "genotype.json"
    if out:
        save(genotype, target)
    for line in summary_lines(genotype.provenance["health"], genotype.nodes, bool(search.bilevel.arch)):
        click.echo(line, err=True)
    click.echo(f"genotype written to {target}", err=True)
    click.echo(repr(genotype.to_dict()["nodes"]))


def _resumed(resume: str, epochs: int | None, time_budget: float | None) -> tuple:
    """(the run directory, locked, and its config, with the limits given) of `--resume`; flags that would change
    the run are refused."""
    from nas.common.runs import RunDir

    run = RunDir(resume)
    run.config()  # a folder that holds no run is said so, and not locked
    run.lock()  # the one writer of the run from here on, before anything is read or written
    stored = run.config()
    config = TaggingSearchConfig.from_file(run.path / "config.json", stored, epochs=epochs, time_budget=time_budget)
    check_resume_flags(
        run.path,
        {**stored, **stored.get("method_settings", {})},
        changeable=("epochs", "time_budget"),
        runtime=("out",),
        defaults={
            "gemm": "auto",
            "backend": "auto",  # a run started before the flags existed
            **{name: getattr(D, name) for name in HEALTH_SETTINGS},
        },
    )
    return run, config


def _fresh(run_dir: str | None, epochs: int | None, time_budget: float | None, order: str | None, options: dict):
    """(the run directory, and the config of the flags given, checked) of a fresh search."""
    from nas.common.runs import RunDir, default_run_dir

    for name in REQUIRED:
        if options[name] is None:
            raise InputError(f"--{name}: required (unless --resume)")
    settings = {name: options.pop(name) for name in METHOD_SETTINGS}
    own = take_method_settings(options)
    check_method_flags(options["method"], {**settings, **own, "order": order, "early_stop": options["early_stop"]})
    _refuse_without_effect(options)
    settings.update((name, options.pop(name)) for name in HEALTH_SETTINGS)  # None: the default
    config = TaggingSearchConfig(
        order=int(order or D.order),
        epochs=epochs if epochs is not None else D.epochs,
        time_budget=time_budget,
        command=command_line("bin/search-tagger"),
        **options,
        method_settings=chosen_settings(options["method"], own),
        **{name: value for name, value in settings.items() if value is not None},
    )
    config.check()  # a resumed config was checked by from_file, naming its file
    return RunDir(run_dir or default_run_dir("search-tagger")), config


def _refuse_without_effect(options: dict) -> None:
    """Flags that act only with another flag's value, typed without it: refused by name, not ignored."""
    from ..embeddings import parse_spec

    ctx = click.get_current_context()
    typed = {name for name in options if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    for name in ("early_stop_window", "early_stop_ratio"):
        if name in typed and options["early_stop"] != "hessian":
            raise InputError(f"--{name.replace('_', '-')}: only with --early-stop hessian")
    if "pooling" in typed and "pooled-flair" not in [kind for kind, _ in parse_spec(options["embeddings"])]:
        raise InputError(
            f"--pooling: only with pooled-flair embeddings; with --embeddings {options['embeddings']} it has no effect"
        )


if __name__ == "__main__":
    main()
