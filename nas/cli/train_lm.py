"""`bin/train-lm`: retrain a cell (or the LSTM baseline) from scratch on a language-modelling corpus."""

from __future__ import annotations

import json
from dataclasses import fields

import click

from nas.common.cli import (
    DEVICE,
    RUN_FOLDER,
    SEED_VALUE,
    THREAD_COUNT,
    backend_option,
    check_resume_flags,
    stored_settings,
    command,
    command_line,
    config_option,
    defaults_option,
    flag_types,
    gemm_option,
    use_threads,
)
from nas.common.errors import InputError
from nas.common.presets import preset_values, presets_help
from nas.common.devices import PRECISIONS
from nas.runs.config import RetrainConfig
from .lm_flags import weight_step_options

D = RetrainConfig()
T = flag_types(RetrainConfig.RANGES)


@command()
@defaults_option("--preset", lookup=lambda name: preset_values(name, "train-lm"), help=presets_help("train-lm"))
@click.option(
    "--cell",
    default=D.cell,
    help="A shipped cell (darts_v2, enas, ...), a genotype JSON file from bin/search-lm, or lstm.",
)
@click.option(
    "--match-cell",
    default="darts_v2",
    help="--cell lstm without --nhid: choose nhid so the LSTM has as many parameters as this cell's layer.",
)
@click.option(
    "--data",
    type=click.Path(),
    help="Corpus directory with train/valid/test files (ptb.train.txt, wiki.train.tokens, ...).",
)
@click.option("--train", "train_file", type=click.Path(), help="Train file, instead of finding it in --data.")
@click.option("--valid", "valid_file", type=click.Path(), help="Validation file (model selection, the ASGD switch).")
@click.option("--test", "test_file", type=click.Path(), help="Test file.")
@click.option("--run-dir", type=RUN_FOLDER, help="Run directory [default: runs/train-<time>].")
@click.option(
    "--resume",
    type=click.Path(file_okay=False),
    help="Continue the run in this directory (its config is reused; --epochs and --time-budget may be raised).",
)
@click.option("--epochs", type=T["epochs"], default=None, help=f"Epoch limit [default: {D.epochs}].")
@click.option(
    "--time-budget",
    type=T["time_budget"],
    default=None,
    help="Minutes of training and validation, summed over resumes; the epoch running when it ends is cut short and "
    "validated.",
)
@click.option(
    "--seed",
    type=SEED_VALUE,
    default=D.seed,
    help="Seed of the weights, the dropout masks and the batches' lengths (the DARTS code retrains with 1267).",
)
@click.option(
    "--emsize",
    type=T["emsize"],
    default=D.emsize,
    help="Embedding size (= the layer's output size: the decoder is tied).",
)
@click.option(
    "--nhid",
    type=T["nhid"],
    default=None,
    help="Hidden size [default: emsize for a cell; for lstm, matched to --match-cell].",
)
@click.option("--batch-size", type=T["batch_size"], default=D.batch_size)
@click.option(
    "--eval-batch-size", type=T["eval_batch_size"], default=D.eval_batch_size, help="Batch size of validation."
)
@click.option(
    "--test-batch-size", type=T["test_batch_size"], default=D.test_batch_size, help="Batch size of the final test."
)
@click.option(
    "--bptt",
    type=T["bptt"],
    default=D.bptt,
    help="Mean sequence length; batches draw theirs from N(bptt, --seq-len-std).",
)
@click.option("--seq-len-std", type=T["seq_len_std"], default=D.seq_len_std)
@click.option(
    "--max-seq-len-delta",
    type=T["max_seq_len_delta"],
    default=D.max_seq_len_delta,
    help="Sequence lengths are at most bptt + this.",
)
@click.option("--lr", type=T["lr"], default=D.lr, help="SGD/ASGD learning rate (scaled by seq_len/bptt per batch).")
@weight_step_options(D, T)
@click.option("--ar", type=T["ar"], default=D.ar, help="Activation regularisation α (DARTS retrains without it).")
@click.option("--tar", type=T["tar"], default=D.tar, help="Temporal activation regularisation β.")
@click.option(
    "--nonmono",
    type=T["nonmono"],
    default=D.nonmono,
    help="Switch SGD to ASGD when validation is worse than the best from before the last N epochs.",
)
@click.option(
    "--max-rollbacks",
    type=T["max_rollbacks"],
    default=D.max_rollbacks,
    help="Rollbacks to the last checkpoint after a non-finite loss or a training NLL beyond twice a uniform "
    "guess's, before giving up.",
)
@click.option(
    "--max-batches-per-epoch",
    type=T["max_batches_per_epoch"],
    default=None,
    help="Cap the batches of an epoch (quick runs).",
)
@click.option(
    "--eval-batches",
    type=T["eval_batches"],
    default=None,
    help="Cap the validation batches at each epoch end (the test is always complete).",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    help="bf16: the training step under torch.autocast (bf16 matmuls, fp32 weights and losses; CPUs with "
    "AVX512-BF16/AMX and GPUs); evaluation stays fp32.",
)
@click.option("--device", type=DEVICE, default=D.device)
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
@gemm_option()
@backend_option()
@config_option(
    "bin/train-lm",
    {"train": "train_file", "valid": "valid_file", "test": "test_file"},
    known=[f.name for f in fields(RetrainConfig)],
)
def main(
    cell,
    match_cell,
    data,
    train_file,
    valid_file,
    test_file,
    run_dir,
    resume,
    epochs,
    time_budget,
    nhid,
    threads,
    **options,
) -> None:
    """Retrain a cell from scratch under the DARTS/AWD protocol and report validation and test perplexity.

    Defaults are the DARTS PTB settings (emsize = nhid = 850, batch 64, SGD lr 20 switching to
    ASGD), but for the seed (the DARTS code's is 1267). A quick CPU run on PTB:

    \b
        bin/train-lm --cell darts_v2 --data data/ptb --run-dir runs/dartsv2 --emsize 200 --time-budget 10
    """
    from nas.common.runs import RunDir, default_run_dir
    from nas import speed
    from nas.runs.train import Trainer, optimizer_kind
    from .terminal import Terminal, run_loop

    if resume:
        run = RunDir(resume)
        stored = run.config()
        config = RetrainConfig.from_dict(stored, run.path / "config.json", epochs=epochs, time_budget=time_budget)
        check_resume_flags(run.path, stored, changeable=("epochs", "time_budget"), runtime=("threads",))
        with stored_settings(run.path / "config.json"):
            config.validate()
    else:
        config = _fresh_config(
            cell, match_cell, nhid, epochs, time_budget, options, data, train_file, valid_file, test_file
        )
        run = RunDir(run_dir or default_run_dir("train"))
    use_threads(threads)
    config.gemm = speed.resolve_gemm(config.gemm)  # recorded: a resumed run keeps them (the run's backend: speed.of)
    config.backend = speed.resolve(config.backend, config.device)
    trainer = Trainer.open(config, run, bool(resume))
    click.echo(_model_lines(trainer, config), err=True)

    def line(t: Trainer, r: dict) -> str:
        switched = " (switching to ASGD)" if r["optimizer"] != optimizer_kind(t.optimizer) else ""
        return (
            f"epoch {r['epoch']}: train ppl {r['train_ppl']:.2f}  valid ppl {r['valid_ppl']:.2f}  "
            f"{r['optimizer']}{switched}  {r['tokens_per_s']:,.0f} tok/s  {r['seconds']:.0f} s"
        )

    metrics = run_loop(trainer, Terminal(lambda t: f"epoch {t.epoch + 1}", line))
    if trainer.ranks.main:
        click.echo(
            json.dumps({k: metrics[k] for k in ("cell", "params", "best_valid_ppl", "test_ppl", "epochs", "seconds")})
        )


def _model_lines(trainer, config: RetrainConfig) -> str:
    """The run directory, the backend, the model and its parameter counts."""
    name = (config.genotype or {}).get("name") or config.cell
    matched = f", matched to {config.match_cell}'s {config.match_rnn_params:,}" if config.match_cell else ""
    return (
        f"run directory: {trainer.run_dir.path} (backend {config.backend})\nmodel: {name}, emsize {config.emsize}, "
        f"nhid {config.nhid}: "
        f"{trainer.parameters():,} parameters ({trainer.rnn_parameters():,} in the recurrent layer{matched})"
    )


def _fresh_config(
    cell: str, match_cell, nhid, epochs, time_budget, options: dict, data, train_file, valid_file, test_file
) -> RetrainConfig:
    """The config of a new retraining from the flags (--cell resolved, --match-cell's LSTM sized), checked."""
    from nas.common.paths import absolute_if_exists
    from nas.common.splits import find_splits
    from nas.runs.train import resolve_cell

    if (cell != "lstm" or nhid is not None) and click.get_current_context().get_parameter_source(
        "match_cell"
    ) == click.core.ParameterSource.COMMANDLINE:
        raise InputError(
            f"--match-cell: only with --cell lstm and no --nhid (it sizes the LSTM); with "
            f"{'--nhid ' + str(nhid) if nhid is not None else '--cell ' + cell} it has no effect"
        )
    paths = find_splits(data, train_file, valid_file, test_file)
    config = RetrainConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        cell=absolute_if_exists(cell),
        epochs=epochs if epochs is not None else D.epochs,
        time_budget=time_budget,
        command=command_line("bin/train-lm"),
        **options,
    )
    config.validate()
    resolve_cell(config, nhid, absolute_if_exists(match_cell))
    return config


if __name__ == "__main__":
    main()
