"""`bin/search-lm`: search a recurrent cell on a language-modelling corpus."""
from __future__ import annotations

import shlex
import sys
from dataclasses import fields
from pathlib import Path

import click

from ..corpus import Corpus, find_splits
from ..errors import InputError, cli_errors
from ..runs import Interrupted, RunDir, default_run_dir
from ..search import SearchConfig, Searcher

D = SearchConfig()


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--data", type=click.Path(), help="Corpus directory with train/valid/test files (ptb.train.txt, wiki.train.tokens, ...).")
@click.option("--train", "train_file", type=click.Path(), help="Train file, instead of finding it in --data.")
@click.option("--valid", "valid_file", type=click.Path(), help="Validation file (the α step and model selection).")
@click.option("--test", "test_file", type=click.Path(), help="Test file.")
@click.option("--method", type=click.Choice(["darts", "idarts"]), default=D.method, help="darts: softmax per edge; idarts: one softmax over all edges into a node.")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the derived genotype JSON (default RUN_DIR/genotype.json).")
@click.option("--order", type=click.Choice(["1", "2"]), default=str(D.order), help="1: first-order α step; 2: unrolled step with a finite-difference Hessian-vector product.")
@click.option("--epochs", type=int, default=None, help=f"Search epochs [default: {D.epochs}].")
@click.option("--seed", type=int, default=D.seed)
@click.option("--nodes", type=int, default=D.nodes, help="Intermediate nodes of the cell.")
@click.option("--top-n", type=int, default=D.top_n, help="idarts: inputs kept per node when deriving the cell.")
@click.option("--emsize", type=int, default=D.emsize)
@click.option("--nhid", type=int, default=D.nhid)
@click.option("--batch-size", type=int, default=D.batch_size)
@click.option("--eval-batch-size", type=int, default=D.eval_batch_size)
@click.option("--bptt", type=int, default=D.bptt)
@click.option("--lr", type=float, default=D.lr, help="SGD learning rate of the weights.")
@click.option("--wdecay", type=float, default=D.wdecay)
@click.option("--clip", type=float, default=D.clip)
@click.option("--dropout", type=float, default=D.dropout, help="Locked dropout on the layer output.")
@click.option("--dropouth", type=float, default=D.dropouth, help="Variational dropout on h inside the cell.")
@click.option("--dropoutx", type=float, default=D.dropoutx, help="Variational dropout on x inside the cell.")
@click.option("--dropouti", type=float, default=D.dropouti, help="Locked dropout on the embeddings.")
@click.option("--dropoute", type=float, default=D.dropoute, help="Embedding-row dropout.")
@click.option("--tar", type=float, default=D.tar, help="Temporal activation regularisation β.")
@click.option("--arch-lr", type=float, default=D.arch_lr, help="Adam learning rate of α.")
@click.option("--arch-wdecay", type=float, default=D.arch_wdecay)
@click.option("--max-batches-per-epoch", type=int, default=None, help="Cap the batches of an epoch (quick runs).")
@click.option("--eval-batches", type=int, default=None, help="Cap the validation batches at each epoch end.")
@click.option("--device", default=D.device, help="cpu, cuda or cuda:N.")
@click.option("--compile", is_flag=True, default=D.compile, help="Run the cell's time step through torch.compile (fused kernels; the first batches pay the compile time). See bench/search_step.py.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run directory [default: runs/search-<time>].")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue the run in this directory (its config is reused).")
@cli_errors
def main(data, train_file, valid_file, test_file, out, epochs, resume, run_dir, order, **options) -> None:
    """Search a recurrent cell by differentiable architecture search and write its genotype.

    Example, a small first-order search on PTB:

        bin/search-lm --data ../shared/data/ptb --method darts --epochs 1 --batch-size 64 --max-batches-per-epoch 50 --out cell.json
    """
    if resume:
        run = RunDir(resume)
        stored = run.config()
        config = SearchConfig(**{f.name: stored[f.name] for f in fields(SearchConfig) if f.name in stored})
        if epochs is not None:
            config.epochs = epochs
    else:
        _check_device(options["device"])
        paths = find_splits(data, train_file, valid_file, test_file)
        config = SearchConfig(train=str(paths["train"]), valid=str(paths["valid"]), test=str(paths["test"]),
                              order=int(order), epochs=epochs if epochs is not None else D.epochs,
                              command=" ".join(shlex.quote(a) for a in ["bin/search-lm", *sys.argv[1:]]), **options)
        _check_config(config)
        run = RunDir(run_dir or default_run_dir("search"))
    corpus = Corpus.load({"train": Path(config.train), "valid": Path(config.valid), "test": Path(config.test)})
    searcher = Searcher(config, run, corpus)
    if resume:
        searcher.load_state(run.load_checkpoint())
        run.trim_log(searcher.epoch)
    else:
        run.start(_config_dict(config))
    click.echo(f"run directory: {run.path}", err=True)
    try:
        genotype = searcher.run()
    except Interrupted as stop:
        click.echo(f"interrupted: {stop}", err=True)
        sys.exit(130)
    genotype.save(run.path / "genotype.json")
    target = Path(out) if out else run.path / "genotype.json"
    if out:
        genotype.save(target)
    run.save_metrics({"search_valid_ppl": genotype.provenance["search_valid_ppl"], "genotype": genotype.to_dict(),
                      "epochs": config.epochs})
    click.echo(f"genotype written to {target}", err=True)
    click.echo(genotype.to_dict()["nodes"].__repr__())


def _config_dict(config: SearchConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in fields(config)}


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: CUDA is not available on this machine (use --device cpu)")


def _check_config(c: SearchConfig) -> None:
    for name in ("epochs", "nodes", "emsize", "nhid", "batch_size", "eval_batch_size", "bptt", "top_n"):
        if getattr(c, name) < 1:
            raise InputError(f"--{name.replace('_', '-')}: must be at least 1, got {getattr(c, name)}")
    for name in ("dropout", "dropouth", "dropoutx", "dropouti", "dropoute"):
        if not 0 <= getattr(c, name) < 1:
            raise InputError(f"--{name}: must be in [0, 1), got {getattr(c, name)}")
    if c.emsize != c.nhid:
        raise InputError(f"--emsize {c.emsize} and --nhid {c.nhid} must be equal: the decoder is tied to the embedding")


if __name__ == "__main__":
    main()
