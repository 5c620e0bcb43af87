"""`bin/search-lm`: search a recurrent cell on a language-modelling corpus."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from common.errors import InputError, cli_errors

from ..config import (ATTENTION_CHOICES, GATE_SIZE_MATCHES, GATE_SQUASHES, PRECISIONS, SEARCH_SPACES, SearchConfig,
                      check_method_flags)
from ..methods import METHODS

if TYPE_CHECKING:
    from common.runs import RunDir

D = SearchConfig()


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--data", type=click.Path(), help="Corpus directory with train/valid/test files (ptb.train.txt, wiki.train.tokens, ...).")
@click.option("--train", "train_file", type=click.Path(), help="Train file, instead of finding it in --data.")
@click.option("--valid", "valid_file", type=click.Path(), help="Validation file (the α step and model selection).")
@click.option("--test", "test_file", type=click.Path(), help="Test file.")
@click.option("--method", type=click.Choice(list(METHODS)), default=D.method, help="; ".join(f"{name}: {m.summary}" for name, m in METHODS.items()) + ".")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the derived genotype JSON (default RUN_DIR/genotype.json).")
@click.option("--order", type=click.Choice(["1", "2"]), default=str(D.order), help="1: first-order α step; 2: unrolled step with a finite-difference Hessian-vector product.")
@click.option("--epochs", type=int, default=None, help=f"Search epochs [default: {D.epochs}].")
@click.option("--seed", type=int, default=D.seed)
@click.option("--seeds", help="Search with each of these seeds (e.g. 1,2,3,4) in its own process and run directory, retrain each cell and keep the best (see --select-budget).")
@click.option("--workers", type=int, default=1, help="--seeds: processes at a time (with --device cuda and several GPUs, worker k uses GPU k).")
@click.option("--select-budget", type=float, default=10.0, help="--seeds: minutes of bin/train-lm retraining per derived cell; the lowest retrained validation perplexity wins.")
@click.option("--select-args", default="", help="--seeds: extra bin/train-lm arguments for the retraining, e.g. \"--emsize 200 --batch-size 32\" [default: train-lm's DARTS protocol].")
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
@click.option("--search-space", type=click.Choice(SEARCH_SPACES), default=None, help=f"ess: what is searched: the cell (plain DARTS), the inter-cell gates around a fixed --cell, or both [default: {D.search_space}].")
@click.option("--cell", "cell_spec", help="ess --search-space inter: the fixed intra cell (genotype file or shipped name).")
@click.option("--rounds", type=int, default=None, help=f"ess: rounds of intra then inter steps [default: {D.rounds}].")
@click.option("--intra-steps", type=int, default=None, help="ess: batches per round that step the intra-cell α [default: half an epoch].")
@click.option("--inter-steps", type=int, default=None, help="ess: batches per round that step the inter-cell α [default: half an epoch].")
@click.option("--arch-lr-intra", type=float, default=None, help=f"ess: Adam learning rate of the intra-cell α [default: {D.arch_lr_intra}].")
@click.option("--arch-lr-inter", type=float, default=None, help=f"ess: Adam learning rate of the inter-cell α [default: {D.arch_lr_inter}].")
@click.option("--history", type=int, default=None, help=f"ess: m, the past inputs/states each gate reads [default: {D.history}].")
@click.option("--inter-nodes", type=int, default=None, help=f"ess: nodes of each gate DAG, at least --history [default: {D.inter_nodes}].")
@click.option("--gate-squash", type=click.Choice(GATE_SQUASHES), default=None, help=f"ess: squash of the gate: sigmoid in (0,1), 2sigmoid in (0,2) starting at 1, none (Eq. 6 as printed) [default: {D.gate_squash}].")
@click.option("--gate-size-match", type=click.Choice(GATE_SIZE_MATCHES), default=None, help=f"ess: how emsize and nhid meet in a gate: project (the history edges' matrices map sizes) or pad (zero-pad/truncate the history vectors) [default: {D.gate_size_match}].")
@click.option("--attention", type=click.Choice(ATTENTION_CHOICES), default=None, help="NASABN attention after the layer: search (softmax mix of dot and multihead, derived by argmax), a fixed type, or none [default: none; with --cell, the cell's].")
@click.option("--attention-heads", type=int, default=D.attention_heads, help="Heads of multi-head attention.")
@click.option("--max-batches-per-epoch", type=int, default=None, help="Cap the batches of an epoch (quick runs).")
@click.option("--eval-batches", type=int, default=None, help="Cap the validation batches at each epoch end.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", help="bf16: the training step under torch.autocast (bf16 matmuls, fp32 weights and losses; CPUs with AVX512-BF16/AMX and GPUs); evaluation stays fp32.")
@click.option("--device", default=D.device, help="cpu, cuda or cuda:N.")
@click.option("--compile", is_flag=True, default=D.compile, help="Run the cell's time step through torch.compile (fused kernels; the first batches pay the compile time). See bench/search_step.py.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run directory [default: runs/search-<time>].")
@click.option("--resume", type=click.Path(file_okay=False), help="Continue the run in this directory (its config is reused).")
@cli_errors
def main(data, train_file, valid_file, test_file, out, epochs, resume, run_dir, order, rounds, cell_spec, seeds,
         workers, select_budget, select_args, **options) -> None:
    """Search a recurrent cell by differentiable architecture search and write its genotype.

    Example, a small first-order search on PTB:

        bin/search-lm --data ../shared/data/ptb --method darts --epochs 1 --batch-size 64 --max-batches-per-epoch 50 --out cell.json

    ESS joint search of the cell and the inter-cell gates, with NASABN attention search:

        bin/search-lm --data ../shared/data/ptb --method ess --rounds 2 --intra-steps 20 --inter-steps 20 --attention search --out ess.json
    """
    from common.runs import RunDir, check_device, default_run_dir
    from common.splits import find_splits

    from ..genotype import load
    from ..search import Searcher
    from .terminal import Terminal, command_line, run_loop

    if seeds and resume:
        raise InputError("--seeds: not with --resume (resume one seed's search with --resume RUN_DIR/seed-S/search)")
    if resume:
        run = RunDir(resume)
        config = SearchConfig.from_dict(run.config(), epochs=epochs, rounds=rounds)
    else:
        check_device(options["device"])
        paths = find_splits(data, train_file, valid_file, test_file)
        check_method_flags(options["method"], {"rounds": rounds, "cell": cell_spec, "epochs": epochs, **options})
        cell = load(cell_spec) if cell_spec else None
        if options["attention"] is None:
            options["attention"] = (cell.attention if cell is not None else None) or "none"
        resolved = {k: v for k, v in options.items() if v is not None}
        config = SearchConfig(train=str(paths["train"]), valid=str(paths["valid"]), test=str(paths["test"]),
                              order=int(order), epochs=epochs if epochs is not None else D.epochs,
                              rounds=rounds if rounds is not None else D.rounds,
                              cell=None if cell is None else cell.to_dict(), command=command_line("bin/search-lm"),
                              **resolved)
        run = RunDir(run_dir or default_run_dir("search"))
    config.validate()
    if seeds:
        return _search_seeds(config, run, seeds, workers, select_budget, select_args, out)
    searcher = Searcher.open(config, run, bool(resume))
    click.echo(f"run directory: {searcher.run_dir.path}", err=True)
    unit = METHODS[config.method].unit
    genotype = run_loop(searcher, Terminal(
        lambda s: f"search {unit} {s.epoch + 1}/{config.total_epochs}",
        lambda s, r: f"{unit} {r['epoch']}: train ppl {r['train_ppl']:.1f}  valid ppl {r['valid_ppl']:.1f}  "
                     f"{r['tokens_per_s']:,.0f} tok/s  genotype {r['genotype']}"))
    if not searcher.ranks.main:
        return
    target = Path(out) if out else searcher.run_dir.path / "genotype.json"
    if out:
        genotype.save(target)
    click.echo(f"genotype written to {target}", err=True)
    click.echo(genotype.to_dict()["nodes"].__repr__())


# Flags of the multi-seed run itself, not passed on to each seed's bin/search-lm.
SEEDS_OWN = ("seeds", "workers", "select_budget", "select_args", "seed", "device", "run_dir", "out", "resume")


def _search_seeds(config: SearchConfig, run: RunDir, seeds: str, workers: int, select_budget: float, select_args: str,
                  out: str | None) -> None:
    """--seeds: one bin/search-lm per seed with the flags given here, then retraining and selection (nas.seeds)."""
    from ..seeds import SeedRuns, parse_seeds, seed_search_args

    ctx = click.get_current_context()
    if ctx.get_parameter_source("seed") != click.core.ParameterSource.DEFAULT:
        raise InputError("--seed: give either --seed or --seeds")
    given = {param.opts[0]: ctx.params[param.name] for param in ctx.command.params
             if param.name not in SEEDS_OWN and ctx.get_parameter_source(param.name) != click.core.ParameterSource.DEFAULT}
    splits = {"train": config.train, "valid": config.valid, "test": config.test}
    board = SeedRuns(run.path, parse_seeds(seeds), workers, seed_search_args(given), splits, config.device,
                     select_budget, shlex.split(select_args), config.command,
                     report=lambda line: click.echo(line, err=True)).run(Path(out) if out else None)
    click.echo(f"leaderboard: {run.path / 'leaderboard.json'}; winner seed {board['winner']}, genotype written to "
               f"{out or run.path / 'genotype.json'}", err=True)
    for entry in board["entries"]:
        retrained = f"{entry['retrain_valid_ppl']:.2f}" if entry["status"] == "ok" else entry["status"]
        click.echo(f"seed {entry['seed']}: {retrained}")


if __name__ == "__main__":
    main()
