"""What `bin/train-tagger` does once its flags are read, which `tagger.train_tagger` runs from Python too:
check the settings, load the cell, corpus and embeddings, size the recurrent layer, train
(`tagger.train.train_runs`), and say on stderr what was loaded and sized.

It lives with the commands because it speaks to the user (lines on stderr); the library below it
does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nas.common.errors import InputError
from nas.common.files import read_json
from nas.common.runs import RunDir

from ..config import TaggerConfig
from ..corpora import TaggingCorpus
from ..train import build_model, train_runs

if TYPE_CHECKING:
    from nas.cells.genotype import Genotype


@dataclass
class Trained:
    """What `run_training` did: the metrics (None after a dry run), the corpus, the settings it ran with
    (paths from the root, `match_params` resolved) and the run directory."""

    metrics: dict | None
    corpus: TaggingCorpus
    config: TaggerConfig
    run_dir: Path
    model: object = None  # the model a dry run built


def run_training(
    config: TaggerConfig,
    run_dir: Path,
    *,
    resume: bool = False,
    genotype: Genotype | None = None,
    dry_run: bool = False,
    hidden_size_given: bool = False,
) -> Trained:
    """Everything bin/train-tagger does once its flags are read (`train_tagger` from Python): check the
    settings, load the cell, the corpus and the embeddings, size the recurrent layer, and train
    (`train_runs`), or with `dry_run` build the model only. `resume`: continue the run in `run_dir`,
    whose settings and `genotype` `config` holds (read by the command). `hidden_size_given`: --hidden-size
    was on the command line, which --match-params with --cell lstm refuses."""
    from dataclasses import replace

    import click

    from nas.common.errors import WriteRefused
    from nas.common.paths import absolute, absolute_if_exists
    from nas import speed

    from ..corpora import load_corpus, parse_columns
    from ..embeddings import absolute_spec, build_embeddings
    from .runtime import flair_logs_to_stderr, use_device

    config.check()
    if not resume and not dry_run and RunDir(run_dir).holds_run():
        if (run_dir / "metrics.json").exists():
            raise InputError(f"{run_dir}: already holds a run; choose another --run-dir")
        raise InputError(
            f"{run_dir}: already holds a run; continue it with --resume {run_dir} or choose another --run-dir"
        )
    matched = config.match_reference()[0] if config.match_params and not resume else None
    if matched == "lstm" and hidden_size_given:
        raise InputError(
            f"--hidden-size: not with --match-params {config.match_params} (the cell's hidden size "
            "is chosen to match the LSTM's parameters)"
        )
    if not resume:
        genotype = load_genotype(config.cell)
    reference = load_genotype(matched) if matched else None  # a cell that does not load fails before the corpus loads
    corpus = load_corpus(
        config.corpus,
        config.data,
        columns=parse_columns(config.columns) if config.columns is not None else None,
        tag_column=config.tag_column,
        scheme=config.tag_scheme,
        seed=config.seed,
    )
    flair_logs_to_stderr()
    use_device(config.device, config.threads)
    config.gemm = speed.resolve_gemm(config.gemm)  # a fresh run records what auto resolved to; a resumed one its own
    config.backend = speed.resolve(config.backend, config.device)  # the same (the run's backend: speed.of)
    embeddings = build_embeddings(config.embeddings, config.pooling, config.fine_tune_embeddings)
    for note in corpus.notes:
        click.echo(note, err=True)
    sized = replace(config, match_params=None) if resume else config  # a resumed run keeps the size it was matched to
    click.echo(size_layer(sized, genotype, reference, embeddings.embedding_length), err=True)
    if dry_run:
        model = build_model(config, corpus, embeddings, genotype)
        click.echo(
            f"model: {config.cell} cell, hidden {config.hidden_size}: "
            f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,} trainable parameters",
            err=True,
        )
        return Trained(None, corpus, config, run_dir, model)
    click.echo(f"run directory: {run_dir}", err=True)
    if not resume:  # config.json names files from the root, so a resume or a rerun works from any folder
        config = replace(
            config,
            data=str(absolute(config.data)),
            cell=absolute_if_exists(config.cell),
            embeddings=absolute_spec(config.embeddings),
            charlm_states=str(absolute(config.charlm_states)) if config.charlm_states else None,
        )
    try:
        metrics = train_runs(config, corpus, embeddings, genotype, run_dir, resume=resume)
    except RuntimeError as err:  # torch's load_state_dict: the checkpoint's tag layer has another size
        if not (resume and "size mismatch" in str(err)):
            raise
        raise InputError(
            f"{config.data}: the corpus changed since the run began: its tags no longer fit the model "
            f"checkpointed in {run_dir}; resume with the files the run started with, or start a new "
            "run"
        ) from None
    except WriteRefused as err:  # a full disk after a checkpoint: the run is kept (train_runs), and resumable
        if not any(run_dir.glob("**/checkpoint.pt")):
            raise
        said = str(err).removesuffix(" (free some space and run again)")
        raise WriteRefused(
            f"{said}; the run is kept up to its last checkpoint: free some space and continue it "
            f"with bin/train-tagger --resume {run_dir}"
        ) from None
    return Trained(metrics, corpus, config, run_dir)


def report_heading(trained: Trained) -> str:
    """The line above the test report bin/train-tagger prints: the split, its size, the model file scored."""
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


def size_layer(config: TaggerConfig, genotype: Genotype | None, reference: Genotype | None, input_size: int) -> str:
    """With --match-params (`reference`: the genotype of the layer matched, None for the LSTM), set
    config.hidden_size to the matching size and config.matched_to; a line that says the recurrent
    layer's size and parameter count (and the matched layer's)."""
    from ..sizing import match_layer, rnn_parameters

    name = "flair's LSTM" if genotype is None else config.cell
    if not config.match_params:
        count = rnn_parameters(genotype, input_size, config.hidden_size)
        return f"recurrent layer: {name}, hidden {config.hidden_size}, {count:,} parameters (both directions)"
    cell, hidden = config.match_reference()
    match = match_layer(genotype, cell, reference, hidden, input_size)
    config.hidden_size, config.matched_to = match.hidden_size, match.reference
    return (
        f"recurrent layer: {name}, hidden {match.hidden_size}, {match.rnn_parameters:,} parameters (both "
        f"directions, input {input_size}); matched to {cell} at hidden {hidden}: {match.reference['rnn_parameters']:,}"
    )


def load_genotype(cell: str) -> Genotype | None:
    """The genotype of --cell (None for lstm: flair's BiLSTM)."""
    if cell.lower() == "lstm":
        return None
    from nas.cells.genotype import load

    return load(cell)
