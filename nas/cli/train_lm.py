"""`bin/train-lm`: retrain a cell (or the LSTM baseline) from scratch on a language-modelling corpus."""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, fields
from pathlib import Path

import click

from .. import distributed
from common.splits import find_splits
from ..corpus import Corpus
from common.errors import InputError, cli_errors
from common.files import atomic_write_json
from ..genotype import load
from ..lm_file import rnn_parameters
from ..lstm import matching_nhid
from common.runs import PRECISIONS, Interrupted, RunDir, check_device, default_run_dir
from ..train import TrainConfig, Trainer

D = TrainConfig()


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--cell", default=D.cell, help="A shipped cell (darts_v2, enas, ...), a genotype JSON file from bin/search-lm, or lstm.")
@click.option("--match-cell", default="darts_v2", help="--cell lstm without --nhid: choose nhid so the LSTM has as many parameters as this cell's layer.")
@click.option("--data", type=click.Path(), help="Corpus directory with train/valid/test files (ptb.train.txt, wiki.train.tokens, ...).")
@click.option("--train", "train_file", type=click.Path(), help="Train file, instead of finding it in --data.")
@click.option("--valid", "valid_file", type=click.Path(), help="Validation file (model selection, the ASGD switch).")
@click.option("--test", "test_file", type=click.Path(), help="Test file.")
@click.option("--out", "--run-dir", "run_dir", type=click.Path(file_okay=False), help="Run directory [default: runs/train-<time>].")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue the run in this directory (its config is reused; --epochs and --time-budget may be raised).")
@click.option("--epochs", type=int, default=None, help=f"Epoch limit [default: {D.epochs}].")
@click.option("--time-budget", type=float, default=None, help="Minutes of training and validation, summed over resumes; the epoch running when it ends is cut short and validated.")
@click.option("--seed", type=int, default=D.seed)
@click.option("--emsize", type=int, default=D.emsize, help="Embedding size (= the layer's output size: the decoder is tied).")
@click.option("--nhid", type=int, default=None, help="Hidden size [default: emsize for a cell; for lstm, matched to --match-cell].")
@click.option("--batch-size", type=int, default=D.batch_size)
@click.option("--eval-batch-size", type=int, default=D.eval_batch_size, help="Batch size of validation.")
@click.option("--test-batch-size", type=int, default=D.test_batch_size, help="Batch size of the final test.")
@click.option("--bptt", type=int, default=D.bptt, help="Mean sequence length; batches draw theirs from N(bptt, --seq-len-std).")
@click.option("--seq-len-std", type=float, default=D.seq_len_std)
@click.option("--max-seq-len-delta", type=int, default=D.max_seq_len_delta, help="Sequence lengths are at most bptt + this.")
@click.option("--lr", type=float, default=D.lr, help="SGD/ASGD learning rate (scaled by seq_len/bptt per batch).")
@click.option("--wdecay", type=float, default=D.wdecay)
@click.option("--clip", type=float, default=D.clip, help="Gradient norm clipping.")
@click.option("--dropout", type=float, default=D.dropout, help="Locked dropout on the layer output.")
@click.option("--dropouth", type=float, default=D.dropouth, help="Variational dropout on h inside the cell (lstm: DropConnect on the hidden weights).")
@click.option("--dropoutx", type=float, default=D.dropoutx, help="Variational dropout on x inside the cell (lstm: on the layer input).")
@click.option("--dropouti", type=float, default=D.dropouti, help="Locked dropout on the embeddings.")
@click.option("--dropoute", type=float, default=D.dropoute, help="Embedding-row dropout.")
@click.option("--ar", type=float, default=D.ar, help="Activation regularisation α (DARTS retrains without it).")
@click.option("--tar", type=float, default=D.tar, help="Temporal activation regularisation β.")
@click.option("--nonmono", type=int, default=D.nonmono, help="Switch SGD to ASGD when validation is worse than the best from before the last N epochs.")
@click.option("--max-rollbacks", type=int, default=D.max_rollbacks, help="Rollbacks to the last checkpoint after a NaN before giving up.")
@click.option("--max-batches-per-epoch", type=int, default=None, help="Cap the batches of an epoch (quick runs).")
@click.option("--eval-batches", type=int, default=None, help="Cap the validation batches at each epoch end (the test is always complete).")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", help="bf16: the training step under torch.autocast (bf16 matmuls, fp32 weights and losses; CPUs with AVX512-BF16/AMX and GPUs); evaluation stays fp32.")
@click.option("--device", default=D.device, help="cpu, cuda or cuda:N.")
@cli_errors
def main(cell, match_cell, data, train_file, valid_file, test_file, run_dir, resume, epochs, time_budget, nhid,
         **options) -> None:
    """Retrain a cell from scratch under the DARTS/AWD protocol and report validation and test perplexity.

    Defaults are the DARTS PTB settings (emsize = nhid = 850, batch 64, SGD lr 20 switching to
    ASGD). A quick CPU run on PTB:

    \b
        bin/train-lm --cell darts_v2 --data ../shared/data/ptb --out runs/dartsv2 --emsize 200 --time-budget 10
    """
    if resume:
        run = RunDir(resume)
        stored = run.config()
        config = TrainConfig(**{f.name: stored[f.name] for f in fields(TrainConfig) if f.name in stored})
        if epochs is not None:
            config.epochs = epochs
        if time_budget is not None:
            config.time_budget = time_budget
        _check_config(config)
    else:
        check_device(options["device"])
        paths = find_splits(data, train_file, valid_file, test_file)
        config = TrainConfig(train=str(paths["train"]), valid=str(paths["valid"]), test=str(paths["test"]),
                             cell=cell, epochs=epochs if epochs is not None else D.epochs, time_budget=time_budget,
                             command=" ".join(shlex.quote(a) for a in ["bin/train-lm", *sys.argv[1:]]), **options)
        _check_config(config)
        if nhid is not None and nhid < 1:
            raise InputError(f"--nhid: must be at least 1, got {nhid}")
        _resolve_cell(config, nhid, match_cell)
        run = RunDir(run_dir or default_run_dir("train"))
    ranks = distributed.init(config.device)  # under torchrun: join the process group; only rank 0 writes
    run = ranks.run_dir(run)
    if resume and (epochs is not None or time_budget is not None) and ranks.main:
        atomic_write_json(run.path / "config.json", asdict(config))
    corpus = Corpus.load({"train": Path(config.train), "valid": Path(config.valid), "test": Path(config.test)})
    trainer = Trainer(config, run, corpus)
    if resume:
        trainer.resume()
    else:
        trainer.start()
    name = (config.genotype or {}).get("name") or config.cell
    matched = f", matched to {config.match_cell}'s {config.match_rnn_params:,}" if config.match_cell else ""
    click.echo(f"run directory: {run.path}\nmodel: {name}, emsize {config.emsize}, nhid {config.nhid}: "
               f"{trainer.parameters():,} parameters ({trainer.rnn_parameters():,} in the recurrent layer{matched})",
               err=True)
    try:
        metrics = trainer.run()
    except Interrupted as stop:
        click.echo(f"interrupted: {stop}", err=True)
        sys.exit(130)
    if ranks.main:
        click.echo(json.dumps({k: metrics[k] for k in ("cell", "params", "best_valid_ppl", "test_ppl", "epochs", "seconds")}))


def _resolve_cell(config: TrainConfig, nhid: int | None, match_cell: str) -> None:
    """Fix the genotype and nhid: a cell runs at nhid = emsize; the LSTM's nhid matches a cell's parameters."""
    if config.cell == "lstm":
        if nhid is None:
            config.match_cell = match_cell
            config.match_rnn_params = rnn_parameters("cell", load(match_cell), config.emsize, config.emsize)
            nhid = matching_nhid(config.emsize, config.match_rnn_params)
        config.nhid = nhid
        return
    config.genotype = load(config.cell).to_dict()
    if nhid is not None and nhid != config.emsize:
        raise InputError(f"--nhid {nhid} and --emsize {config.emsize} must be equal for a cell: "
                         "the decoder is tied to the embedding")
    config.nhid = config.emsize


def _check_config(c: TrainConfig) -> None:
    for name in ("epochs", "emsize", "nhid", "batch_size", "eval_batch_size", "test_batch_size", "bptt", "nonmono",
                 "max_batches_per_epoch", "eval_batches"):
        value = getattr(c, name)
        if value is not None and value < 1:
            raise InputError(f"--{name.replace('_', '-')}: must be at least 1, got {value}")
    for name in ("max_rollbacks", "max_seq_len_delta", "seq_len_std", "lr", "wdecay", "ar", "tar"):
        if getattr(c, name) < 0:
            raise InputError(f"--{name.replace('_', '-')}: must not be negative, got {getattr(c, name)}")
    for name in ("dropout", "dropouth", "dropoutx", "dropouti", "dropoute"):
        if not 0 <= getattr(c, name) < 1:
            raise InputError(f"--{name}: must be in [0, 1), got {getattr(c, name)}")
    if c.clip <= 0:
        raise InputError(f"--clip: must be positive, got {c.clip}")
    if c.time_budget is not None and not c.time_budget > 0:
        raise InputError(f"--time-budget: must be a positive number of minutes, got {c.time_budget}")


if __name__ == "__main__":
    main()
