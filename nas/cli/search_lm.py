"""`bin/search-lm`: search a recurrent cell on a language-modelling corpus."""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

import click

from nas.common.cli import (
    COUNT,
    DEVICE,
    OUTPUT_FILE,
    RUN_FOLDER,
    SEED_VALUE,
    THREAD_COUNT,
    backend_option,
    bounded,
    check_resume_flags,
    stored_settings,
    command,
    command_line,
    config_option,
    defaults_option,
    flag_types,
    gemm_option,
    loaded_config,
    not_from_config,
    use_threads,
)
from nas.common.devices import PRECISIONS
from nas.common.errors import InputError
from nas.common.presets import preset_values, presets_help
from nas.common.ranges import MINUTES
from nas.runs.config import (
    ATTENTION_CHOICES,
    EARLY_STOPS,
    GATE_SIZE_MATCHES,
    GATE_SQUASHES,
    SEARCH_SPACES,
    SearchConfig,
)
from ..methods import METHODS, check_method_flags, entry, method_settings, total_epochs
from .lm_flags import weight_step_options
from .method_flags import chosen_settings, method_setting_options, take_method_settings

if TYPE_CHECKING:
    from nas.common.runs import RunDir

D = SearchConfig()
T = flag_types(SearchConfig.RANGES)
# config.json keys that fill another flag, or none (the fixed cell is stored as a genotype, see main)
CONFIG_KEYS = {"train": "train_file", "valid": "valid_file", "test": "test_file", "cell": None}


@command()
@defaults_option("--preset", lookup=lambda name: preset_values(name, "search-lm"), help=presets_help("search-lm"))
@click.option(
    "--data",
    type=click.Path(),
    help="Corpus directory with train/valid/test files (ptb.train.txt, wiki.train.tokens, ...).",
)
@click.option("--train", "train_file", type=click.Path(), help="Train file, instead of finding it in --data.")
@click.option("--valid", "valid_file", type=click.Path(), help="Validation file (the α step and model selection).")
@click.option("--test", "test_file", type=click.Path(), help="Test file.")
@click.option(
    "--method",
    type=click.Choice(list(METHODS)),
    default=D.method,
    help="; ".join(f"{name}: {m.summary}" for name, m in METHODS.items()) + ".",
)
@click.option(
    "--out", type=OUTPUT_FILE, help="Where to write the derived genotype JSON (default RUN_DIR/genotype.json)."
)
@click.option(
    "--order",
    type=click.Choice(["1", "2"]),
    default=None,
    help="1: first-order α step; 2: unrolled step with a finite-difference Hessian-vector product [default: "
    f"{D.order}].",
)
@click.option("--epochs", type=T["epochs"], default=None, help=f"Search epochs [default: {D.epochs}].")
@click.option(
    "--seed",
    type=SEED_VALUE,
    default=D.seed,
    help="Seed of the weights, the dropout masks and the batches' lengths (the DARTS code searches with 3).",
)
@click.option(
    "--seeds",
    help="Search with each of these seeds (e.g. 1,2,3,4) in its own process and run directory, retrain each cell and "
    "keep the best (see --select-budget).",
)
@click.option(
    "--workers",
    type=COUNT,
    default=1,
    help="--seeds: seeds at a time, on a local Ray instance started for this command (more than 1 needs the ray extra; "
    "with --device cuda each seed gets a GPU of its own, or a share of one: --seeds-per-gpu). Without --seeds: "
    "random search and ENAS score their candidates on this many workers at once (the same scores).",
)
@click.option(
    "--seeds-per-gpu",
    type=COUNT,
    default=1,
    help="--seeds with --device cuda and more than one --workers: this many seeds share one GPU (Ray's fractional "
    "GPUs). A search is launch-bound at small sizes and leaves most of a GPU idle; docs/speed.md measures how "
    "many fit.",
)
@click.option(
    "--ray-address",
    help="--seeds: send the seeds (without --seeds: the candidates to score) to this existing Ray cluster (e.g. "
    "10.0.0.1:6379, or auto); every node needs the same environment, data paths and --run-dir.",
)
@click.option(
    "--select-budget",
    type=bounded(MINUTES),
    default=10.0,
    help="--seeds: minutes of bin/train-lm retraining per derived cell; the lowest retrained validation perplexity "
    "wins.",
)
@click.option(
    "--select-args",
    default="",
    help="--seeds: extra bin/train-lm arguments for the retraining, e.g. \"--emsize 200 --batch-size 32\" [default: "
    "train-lm's DARTS protocol].",
)
@click.option("--nodes", type=T["nodes"], default=D.nodes, help="Intermediate nodes of the cell.")
@click.option(
    "--top-n",
    type=T["top_n"],
    default=None,
    help=f"idarts: inputs kept per node when deriving the cell [default: {D.top_n}].",
)
@click.option("--emsize", type=T["emsize"], default=D.emsize)
@click.option("--nhid", type=T["nhid"], default=D.nhid)
@click.option("--batch-size", type=T["batch_size"], default=D.batch_size)
@click.option("--eval-batch-size", type=T["eval_batch_size"], default=D.eval_batch_size)
@click.option("--bptt", type=T["bptt"], default=D.bptt)
@click.option("--lr", type=T["lr"], default=D.lr, help="SGD learning rate of the weights.")
@weight_step_options(D, T)
@click.option("--tar", type=T["tar"], default=D.tar, help="Temporal activation regularisation β.")
@click.option(
    "--lr-decay",
    type=T["lr_decay"],
    default=None,
    help="Factor the weights' lr is multiplied by each epoch (ESS: round) from --lr-decay-start on; 1 keeps it "
    "constant, as DARTS's search does (ENAS's PTB search: 0.95 from epoch 12). A resume may change it for epochs "
    f"not yet begun [default: {D.lr_decay}].",
)
@click.option(
    "--lr-decay-start",
    type=T["lr_decay_start"],
    default=None,
    help=f"The first epoch (ESS: round) whose lr --lr-decay shrinks [default: {D.lr_decay_start}].",
)
@click.option("--arch-lr", type=T["arch_lr"], default=D.arch_lr, help="Adam learning rate of α.")
@click.option("--arch-wdecay", type=T["arch_wdecay"], default=D.arch_wdecay)
@click.option(
    "--search-space",
    type=click.Choice(SEARCH_SPACES),
    default=None,
    help="ess: what is searched: the cell (plain DARTS), the inter-cell gates around a fixed --cell, or both "
    f"[default: {D.search_space}].",
)
@click.option(
    "--cell", "cell_spec", help="ess --search-space inter: the fixed intra cell (genotype file or shipped name)."
)
@click.option(
    "--rounds", type=T["rounds"], default=None, help=f"ess: rounds of intra then inter steps [default: {D.rounds}]."
)
@click.option(
    "--intra-steps",
    type=T["intra_steps"],
    default=None,
    help="ess: batches per round that step the intra-cell α [default: half an epoch].",
)
@click.option(
    "--inter-steps",
    type=T["inter_steps"],
    default=None,
    help="ess: batches per round that step the inter-cell α [default: half an epoch].",
)
@click.option(
    "--arch-lr-intra",
    type=T["arch_lr_intra"],
    default=None,
    help=f"ess: Adam learning rate of the intra-cell α [default: {D.arch_lr_intra}].",
)
@click.option(
    "--arch-lr-inter",
    type=T["arch_lr_inter"],
    default=None,
    help=f"ess: Adam learning rate of the inter-cell α [default: {D.arch_lr_inter}].",
)
@click.option(
    "--history",
    type=T["history"],
    default=None,
    help=f"ess: m, the past inputs/states each gate reads [default: {D.history}].",
)
@click.option(
    "--inter-nodes",
    type=T["inter_nodes"],
    default=None,
    help=f"ess: nodes of each gate DAG, at least --history [default: {D.inter_nodes}].",
)
@click.option(
    "--gate-squash",
    type=click.Choice(GATE_SQUASHES),
    default=None,
    help="ess: squash of the gate: sigmoid in (0,1), 2sigmoid in (0,2) starting at 1, none (Eq. 6 as printed) "
    f"[default: {D.gate_squash}].",
)
@click.option(
    "--gate-size-match",
    type=click.Choice(GATE_SIZE_MATCHES),
    default=None,
    help="ess: how emsize and nhid meet in a gate: project (the history edges' matrices map sizes) or pad "
    f"(zero-pad/truncate the history vectors) [default: {D.gate_size_match}].",
)
@click.option(
    "--attention",
    type=click.Choice(ATTENTION_CHOICES),
    default=None,
    help="NASABN attention after the layer: search (softmax mix of dot and multihead, derived by argmax), a fixed "
    "type, or none [default: none; with --cell, the cell's].",
)
@click.option(
    "--attention-heads", type=T["attention_heads"], default=D.attention_heads, help="Heads of multi-head attention."
)
@click.option(
    "--candidates",
    type=T["candidates"],
    default=None,
    help="random, enas: architectures scored at the end with the shared weights, the best kept: random draws them "
    "uniformly and scores each on the validation split, enas samples them from its controller and scores each on "
    f"one validation batch [default: {D.candidates}].",
)
@click.option(
    "--controller-steps",
    type=T["controller_steps"],
    default=None,
    help="enas: REINFORCE updates of the controller after each epoch, one sampled cell and one validation batch each "
    f"[default: {D.controller_steps}].",
)
@click.option(
    "--controller-lr",
    type=T["controller_lr"],
    default=None,
    help=f"enas: Adam learning rate of the controller [default: {D.controller_lr}].",
)
@click.option(
    "--entropy-weight",
    type=T["entropy_weight"],
    default=None,
    help=f"enas: weight of the controller's sample entropy added to the reward 80/ppl [default: {D.entropy_weight}].",
)
@click.option(
    "--baseline-decay",
    type=T["baseline_decay"],
    default=None,
    help=f"enas: decay of the reward's moving-average baseline [default: {D.baseline_decay}].",
)
@click.option(
    "--track-candidates",
    type=T["track_candidates"],
    default=None,
    help="random: fixed draws scored like the candidates at each epoch end; the log follows their best, and so does "
    f"the convergence rule [default: {D.track_candidates}].",
)
@method_setting_options
@click.option(
    "--hessian-iterations",
    type=T["hessian_iterations"],
    default=None,
    help="Power iterations for the dominant eigenvalue of the Hessian of the validation loss in α, logged each epoch "
    f"(0: not computed) [default: {D.hessian_iterations}].",
)
@click.option(
    "--early-stop",
    type=click.Choice(EARLY_STOPS),
    default=None,
    help="hessian: DARTS-ES (Zela et al. 2020): stop when the eigenvalue's mean over the last --early-stop-window "
    "epochs exceeds that of the window before by more than 1/--early-stop-ratio, and derive the cell from α of "
    "the window's start; converged: stop at the first epoch the convergence rule holds (the cell unchanged, α's "
    "MAD and the validation perplexity settled over 5 epochs; docs: Search health) and derive the cell from α as "
    "it stands [default: none].",
)
@click.option(
    "--early-stop-window",
    type=T["early_stop_window"],
    default=None,
    help=f"--early-stop hessian: epochs per window, k [default: {D.early_stop_window}].",
)
@click.option(
    "--early-stop-ratio",
    type=T["early_stop_ratio"],
    default=None,
    help="--early-stop hessian: stop when mean λ of the earlier window / mean λ of the last one falls below this "
    f"[default: {D.early_stop_ratio}].",
)
@click.option(
    "--time-budget",
    type=T["time_budget"],
    default=None,
    help="Minutes of training and validation, summed over resumes; the epoch running when it ends is cut short, "
    "validated, and the search concludes.",
)
@click.option(
    "--max-rollbacks",
    type=T["max_rollbacks"],
    default=None,
    help="Rollbacks to the last checkpoint after a non-finite loss or gradient, or a training NLL beyond twice a "
    "uniform guess's (fresh dropout masks and sequence lengths; a weight-sharing search draws the same cells) before "
    f"giving up [default: {D.max_rollbacks}].",
)
@click.option(
    "--max-batches-per-epoch",
    type=T["max_batches_per_epoch"],
    default=None,
    help="Cap the batches of an epoch (quick runs).",
)
@click.option(
    "--eval-batches", type=T["eval_batches"], default=None, help="Cap the validation batches at each epoch end."
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
@click.option(
    "--compile",
    is_flag=True,
    default=D.compile,
    help="Run the cell's time step through torch.compile (fused kernels; the first batches pay the compile time): the "
    "torch backend's compiled step (--backend auto then means torch on a CPU; cuda-graphs compiles anyway; not "
    "with cpu-fused). See bench/search_step.py.",
)
@click.option("--run-dir", type=RUN_FOLDER, help="Run directory [default: runs/search-<time>].")
@click.option(
    "--resume", type=click.Path(file_okay=False), help="Continue the run in this directory (its config is reused)."
)
@config_option("bin/search-lm", CONFIG_KEYS, known=[f.name for f in fields(SearchConfig)])
def main(
    data,
    train_file,
    valid_file,
    test_file,
    out,
    epochs,
    resume,
    run_dir,
    order,
    rounds,
    cell_spec,
    seeds,
    workers,
    seeds_per_gpu,
    ray_address,
    select_budget,
    select_args,
    threads,
    time_budget,
    max_rollbacks,
    **options,
) -> None:
    """Search a recurrent cell (differentiable search, or the random-search and ENAS baselines) and write its genotype.

    Example, a small first-order search on PTB:

    \b
        bin/search-lm --data data/ptb --method darts --epochs 1 --batch-size 64 --max-batches-per-epoch 50 --out cell.json

    ESS joint search of the cell and the inter-cell gates, with NASABN attention search:

    \b
        bin/search-lm --data data/ptb --method ess --rounds 2 --intra-steps 20 --inter-steps 20 --attention search --out ess.json

    A regularised DARTS, here β-DARTS with its own flags (beta-darts, darts-minus and sdarts-rs each have theirs):

    \b
        bin/search-lm --data data/ptb --method beta-darts --beta-lambda-end 50 --epochs 2 --max-batches-per-epoch 50 --out beta.json
    """  # noqa: E501 (example command lines stay whole, to copy)
    from nas.common.splits import find_splits
    from nas import speed

    seeds, select_args = _seed_flags(seeds, resume, select_args)
    settings = take_method_settings(options)
    limits = {"epochs": epochs, "rounds": rounds, "time_budget": time_budget, "max_rollbacks": max_rollbacks}
    if resume:
        config, run = _resumed_config(resume, limits, options)
    else:
        paths = find_splits(data, train_file, valid_file, test_file)
        config, run = _fresh_config(paths, run_dir, order, cell_spec, limits, options, settings)
    with stored_settings(Path(resume) / "config.json" if resume else None):
        config.validate()
    use_threads(threads)
    config.gemm = speed.resolve_gemm(config.gemm)  # recorded: a resumed run keeps them (the run's backend: speed.of)
    config.backend = speed.resolve(config.backend, config.device, config.compile)
    if seeds is not None:
        return _search_seeds(config, run, seeds, workers, seeds_per_gpu, ray_address, select_budget, select_args, out)
    _search(config, run, bool(resume), workers, ray_address, out)


def _search(config: SearchConfig, run: RunDir, resume: bool, workers: int, ray_address: str | None, out) -> None:
    """One search in `run` (its candidates scored on Ray workers with --workers or --ray-address), then its report."""
    from nas.runs.candidates import RayScoring, check_scoring
    from nas.runs.search import Searcher
    from .terminal import Terminal, run_loop

    candidates_on_ray = workers > 1 or bool(ray_address)
    if candidates_on_ray:
        check_scoring(config.method, workers, ray_address)
    searcher = Searcher.open(config, run, resume)
    if candidates_on_ray:
        if searcher.ranks.parallel:
            raise InputError("--workers without --seeds: not under torchrun (the ranks already share the work)")
        searcher.method.parallel_scoring = RayScoring(config, searcher.model, searcher.validation, workers, ray_address)
    click.echo(f"run directory: {searcher.run_dir.path} (backend {config.backend})", err=True)
    unit = entry(config.method).unit
    genotype = run_loop(
        searcher,
        Terminal(
            lambda s: f"search {unit} {s.epoch + 1}/{total_epochs(config)}",
            lambda s, r: (
                f"{unit} {r['epoch']}: train ppl {r['train_ppl']:.1f}  valid ppl {r['valid_ppl']:.1f}  "
                + (f"λmax {r['eigenvalue']:.3g}  " if "eigenvalue" in r else "")
                + f"{r['tokens_per_s']:,.0f} tok/s  genotype {r['genotype']}"
            ),
        ),
    )
    if searcher.ranks.main:
        _report(searcher, genotype, out, unit)


def _seed_flags(seeds: str | None, resume: str | None, select_args: str | None) -> tuple:
    """--seeds and the retraining's flags, checked before the first search (without --seeds: the flags
    that only act with it, refused when typed)."""
    if seeds is not None and resume:
        raise InputError("--seeds: not with --resume (resume one seed's search with --resume RUN_DIR/seed-S/search)")
    if seeds is not None:
        from nas.common.cli import passed_on
        from nas.runs.seeds import parse_seeds, select_arguments
        from .train_lm import main as train_lm

        seeds, select_args = parse_seeds(seeds), select_arguments(select_args)
        passed_on(train_lm, "bin/train-lm", select_args, "--select-args")
        return seeds, select_args
    ctx = click.get_current_context()
    if ctx.get_parameter_source("seeds_per_gpu") == click.core.ParameterSource.COMMANDLINE:
        raise InputError("--seeds-per-gpu: only with --seeds (it places several seeds' searches on one GPU)")
    for name in ("select_budget", "select_args"):
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            raise InputError(
                f"--{name.replace('_', '-')}: only with --seeds (it sets the retraining of each "
                "seed's cell); without --seeds it has no effect"
            )
    return seeds, select_args


def _resumed_config(resume: str, limits: dict, options: dict) -> tuple[SearchConfig, RunDir]:
    """The config of the run in `resume`, with the limits typed now (--epochs, ...) in place; any other flag
    typed that differs from the stored setting is refused."""
    from nas.common.runs import RunDir

    run = RunDir(resume)
    stored = run.config()
    config = SearchConfig.from_dict(
        stored,
        run.path / "config.json",
        **limits,
        lr_decay=options["lr_decay"],
        lr_decay_start=options["lr_decay_start"],
    )
    method_settings(config, lambda name: f"{run.path / 'config.json'}: setting {name!r}")
    check_resume_flags(
        run.path,
        {**stored, **stored.get("method_settings", {})},
        changeable=("epochs", "rounds", "time_budget", "max_rollbacks", "lr_decay", "lr_decay_start"),
        runtime=("threads", "out"),
        defaults=asdict(D),
    )
    return config, run


def _fresh_config(
    paths: dict, run_dir: str | None, order, cell_spec, limits: dict, options: dict, settings: dict
) -> tuple[SearchConfig, RunDir]:
    """The config of a new search from the flags (and --config/--preset), each checked against the method."""
    from nas.cells.genotype import load, validate
    from nas.common.runs import RunDir, default_run_dir

    epochs, rounds = limits["epochs"], limits["rounds"]
    check_method_flags(
        options["method"],
        not_from_config({"rounds": rounds, "cell": cell_spec, "epochs": epochs, "order": order, **options, **settings}),
    )
    from_config = loaded_config()
    settings = chosen_settings(
        options["method"],
        settings,
        from_config.get("method_settings") if from_config.get("method") == options["method"] else None,
    )
    stored_cell = loaded_config().get("cell")
    cell = load(cell_spec) if cell_spec else validate(stored_cell, "--config cell") if stored_cell else None
    if options["attention"] is None:
        options["attention"] = (cell.attention if cell is not None else None) or "none"
    _refuse_without_effect(options)
    resolved = {k: v for k, v in options.items() if v is not None}
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        order=int(order or D.order),
        epochs=epochs if epochs is not None else D.epochs,
        rounds=rounds if rounds is not None else D.rounds,
        cell=None if cell is None else cell.to_dict(),
        command=command_line("bin/search-lm"),
        time_budget=limits["time_budget"],
        max_rollbacks=limits["max_rollbacks"] or 0,
        method_settings=settings,
        **resolved,
    )
    return config, RunDir(run_dir or default_run_dir("search"))


def _report(searcher, genotype, out: str | None, unit: str) -> None:
    """The genotype written to --out, and what the search's end says: the candidates' ranks, the health."""
    from nas.cells.genotype import save
    from nas.common.files import read_json
    from nas.runs.health import summary_lines

    target = Path(out) if out else searcher.run_dir.path / "genotype.json"
    if out:
        save(genotype, target)
    metrics = read_json(searcher.run_dir.path / "metrics.json")
    valid_ppl = genotype.provenance["search_valid_ppl"]
    if valid_ppl is None:
        click.echo(
            "warning: the search's last validation perplexity is not finite (the model diverged on the "
            "validation split); the genotype is derived from α all the same (a lower --lr "
            "avoids it)",
            err=True,
        )
    if "candidate_ppl" in metrics:  # a method that chose among candidates: how the chosen one ranks
        ranks = metrics["candidate_ppl"]
        click.echo(
            f"best of {len(metrics['candidates'])} candidates: valid ppl {ranks['best']:.1f} "
            f"(median {ranks['median']:.1f}, worst {ranks['worst']:.1f}; all in metrics.json); "
            f"on the validation split {valid_ppl if valid_ppl is None else round(valid_ppl, 1)}",
            err=True,
        )
    for line in summary_lines(metrics["health"], genotype.nodes, bool(searcher.bilevel.arch), unit):
        click.echo(line, err=True)
    click.echo(f"genotype written to {target}", err=True)
    click.echo(genotype.to_dict()["nodes"].__repr__())


def _refuse_without_effect(options: dict) -> None:
    """Flags that act only with another flag's value, typed without it: refused by name, not ignored."""
    ctx = click.get_current_context()
    typed = {name for name in options if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    for name in ("early_stop_window", "early_stop_ratio"):
        if name in typed and options["early_stop"] != "hessian":
            raise InputError(f"--{name.replace('_', '-')}: only with --early-stop hessian")
    if "attention_heads" in typed and options["attention"] not in ("search", "multihead"):
        raise InputError(
            f"--attention-heads: only with multi-head attention (--attention search or multihead); "
            f"the attention here is {options['attention']}"
        )


# Flags of the multi-seed run itself, not passed on to each seed's bin/search-lm.
SEEDS_OWN = (
    "seeds",
    "workers",
    "seeds_per_gpu",
    "ray_address",
    "select_budget",
    "select_args",
    "seed",
    "device",
    "run_dir",
    "out",
    "resume",
    "data",
    "train_file",
    "valid_file",
    "test_file",
)  # the splits go on as absolute --train/--valid/--test


def _search_seeds(
    config: SearchConfig,
    run: RunDir,
    seeds: list[int],
    workers: int,
    seeds_per_gpu: int,
    address: str | None,
    select_budget: float,
    select_args: list[str],
    out: str | None,
) -> None:
    """--seeds: one bin/search-lm per seed with the flags given here, then retraining and selection (nas.runs.seeds)."""
    from nas.common.paths import absolute_if_exists
    from nas.runs.seeds import SeedRuns, seed_search_args

    ctx = click.get_current_context()
    if ctx.get_parameter_source("seed") != click.core.ParameterSource.DEFAULT:
        raise InputError("--seed: give either --seed or --seeds")
    given = {
        param.opts[0]: ctx.params[param.name]
        for param in ctx.command.params
        if param.name not in SEEDS_OWN and ctx.get_parameter_source(param.name) != click.core.ParameterSource.DEFAULT
    }
    splits = {"train": config.train, "valid": config.valid, "test": config.test}
    if "--cell" in given:
        given["--cell"] = absolute_if_exists(given["--cell"])
    given = {**{f"--{k}": v for k, v in splits.items()}, **given}
    board = SeedRuns(
        run.path,
        seeds,
        workers,
        seed_search_args(given),
        splits,
        config.device,
        select_budget,
        select_args,
        config.command,
        report=lambda line: click.echo(line, err=True),
        address=address,
        seeds_per_gpu=seeds_per_gpu,
    ).run(Path(out) if out else None)
    click.echo(
        f"leaderboard: {run.path / 'leaderboard.json'}; winner seed {board['winner']}, genotype written to "
        f"{out or run.path / 'genotype.json'}",
        err=True,
    )
    for row in board["entries"]:
        retrained = f"{row['retrain_valid_ppl']:.2f}" if row["status"] == "ok" else row["status"]
        click.echo(f"seed {row['seed']}: {retrained}")


if __name__ == "__main__":
    main()
