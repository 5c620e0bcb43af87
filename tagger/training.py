"""A tagger's training from its settings, what `bin/train-tagger` does once its flags are read, and
`tagger.train_tagger`, the same from Python: check the settings, load the cell, corpus and embeddings,
size the recurrent layer, train (`tagger.train.train_runs`), and say on stderr what was loaded and
sized (`say`: the command's `click.echo`; from Python, the `tagger` logger).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from nas.common.errors import InputError
from nas.common.runs import RunDir

from .config import TaggerConfig
from .corpora import TaggingCorpus
from .train import build_model, train_runs

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
    say: Callable[[str], None],
) -> Trained:
    """Everything bin/train-tagger does once its flags are read (`train_tagger` from Python): check the
    settings, load the cell, the corpus and the embeddings, size the recurrent layer, and train
    (`train_runs`), or with `dry_run` build the model only. `resume`: continue the run in `run_dir`,
    whose settings and `genotype` `config` holds (read by the command). `hidden_size_given`: --hidden-size
    was on the command line, which --match-params with --cell lstm refuses. `say` takes the lines for the user."""
    from nas import speed

    from .corpora import corpus_of
    from .embeddings import build_embeddings
    from .flair_runtime import flair_logs_to_stderr, use_device

    genotype, reference = _check(config, run_dir, resume, genotype, dry_run, hidden_size_given)
    corpus = corpus_of(config)
    flair_logs_to_stderr()
    use_device(config.device, config.threads)
    config.gemm = speed.resolve_gemm(config.gemm)  # a fresh run records what auto resolved to; a resumed one its own
    config.backend = speed.resolve(config.backend, config.device)  # the same (the run's backend: speed.of)
    embeddings = build_embeddings(config.embeddings, config.pooling, config.fine_tune_embeddings)
    for note in corpus.notes:
        say(note)
    sized = replace(config, match_params=None) if resume else config  # a resumed run keeps the size it was matched to
    say(size_layer(sized, genotype, reference, embeddings.embedding_length))
    if dry_run:
        model = build_model(config, corpus, embeddings, genotype)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        say(f"model: {config.cell} cell, hidden {config.hidden_size}: {trainable:,} trainable parameters")
        return Trained(None, corpus, config, run_dir, model)
    say(f"run directory: {run_dir}")
    if not resume:  # config.json names files from the root, so a resume or a rerun works from any folder
        config = _from_the_root(config)
    metrics = _train(config, corpus, embeddings, genotype, run_dir, resume)
    return Trained(metrics, corpus, config, run_dir)


def _check(
    config: TaggerConfig,
    run_dir: Path,
    resume: bool,
    genotype: Genotype | None,
    dry_run: bool,
    hidden_size_given: bool,
) -> tuple[Genotype | None, Genotype | None]:
    """The settings, the run directory and the cells, checked before the corpus loads: the genotype of the
    run (a resumed run's, else --cell's), and that of the layer --match-params names (None: the LSTM, or none)."""
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
    return genotype, load_genotype(matched) if matched else None  # a cell that does not load fails before the corpus


def _from_the_root(config: TaggerConfig) -> TaggerConfig:
    """`config` with its files named from the root, as config.json records them."""
    from nas.common.paths import absolute, absolute_if_exists

    from .embeddings import absolute_spec

    return replace(
        config,
        data=str(absolute(config.data)),
        cell=absolute_if_exists(config.cell),
        embeddings=absolute_spec(config.embeddings),
        charlm_states=str(absolute(config.charlm_states)) if config.charlm_states else None,
    )


def _train(config: TaggerConfig, corpus, embeddings, genotype: Genotype | None, run_dir: Path, resume: bool) -> dict:
    """`train_runs`, its failures said as the user can act on them: a resume whose corpus no longer fits the
    checkpoint, and a full disk after a checkpoint (the run is kept, and resumable)."""
    from nas.common.errors import WriteRefused

    try:
        return train_runs(config, corpus, embeddings, genotype, run_dir, resume=resume)
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


def size_layer(config: TaggerConfig, genotype: Genotype | None, reference: Genotype | None, input_size: int) -> str:
    """With --match-params (`reference`: the genotype of the layer matched, None for the LSTM), set
    config.hidden_size to the matching size and config.matched_to; a line that says the recurrent
    layer's size and parameter count (and the matched layer's)."""
    from .sizing import match_layer, rnn_parameters

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


# -- the same from Python ---------------------------------------------------------------------

log = logging.getLogger("tagger")
NOT_FLAGS = ("matched_to", "preset", "command")  # TaggerConfig's fields that no bin/train-tagger flag sets as such


def train_tagger(config: TaggerConfig, run_dir: str | Path | None = None) -> dict:
    """Train the tagger of `config` into `run_dir` exactly as `bin/train-tagger` does, and return its metrics.

    The same settings object as the command's (`TaggerConfig`: one field per flag, the same defaults),
    the same checks, and the same run directory (default `runs/tagger-<time>`): config.json,
    best-model.pt, metrics.json, the model card README.md, test.conll, training.log and loss.tsv; with
    `config.runs` > 1, one folder per seed and a summary. Lines that say what it loaded and sized go to
    the `tagger` logger, flair's log to stderr as with the command; the test report is `metrics["test"]`
    (`tagger.evaluation.table` prints it).

    config.json records `config.command` if set, else the `bin/train-tagger` command line that makes the
    same run, marked as written by this call; `bin/train-tagger --resume RUN_DIR` continues the run if
    it is interrupted (Ctrl-C raises `nas.common.runs.Interrupted` after the epoch's checkpoint). Like
    the command, it sets flair's device, torch's CPU threads (`config.threads`) and the process's
    matrix-product rule (`config.gemm`), and it is the one writer of the run directory while it runs.
    """
    from nas.common.runs import default_run_dir

    run_dir = Path(run_dir) if run_dir is not None else default_run_dir("tagger")
    config = replace(config)  # the caller's object is left as it was
    if not config.command:
        config.command = equivalent_command(config, run_dir)
    with _one_command():
        return run_training(config, run_dir, say=_to_log).metrics


def equivalent_command(config: TaggerConfig, run_dir: Path) -> str:
    """The bin/train-tagger command line of `config` (its flags that differ from the defaults, --corpus and
    --data always), then a shell comment saying it was run from Python: a command `--config` accepts.

    A field's flag is its name as click spells options (`--word-vocab` for word_vocab; `--no-reproject` for a
    switch turned off), which tests/test_tagger_api.py checks against the command's own flags."""
    import shlex

    default = TaggerConfig()
    words = ["bin/train-tagger"]
    for name in (f.name for f in fields(TaggerConfig) if f.name not in NOT_FLAGS):
        if name == "hidden_size" and (config.match_params or "").lower().startswith("lstm:"):
            continue  # chosen to match the LSTM's parameters: the command refuses --hidden-size with it
        value, flag = getattr(config, name), "--" + name.replace("_", "-")
        if name not in ("corpus", "data") and (value == getattr(default, name) or value is None):
            continue
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        else:
            words += [flag, shlex.quote(str(value))]
    words += ["--run-dir", shlex.quote(str(run_dir))]
    return " ".join(words) + f"  # run as tagger.train_tagger(config, {str(run_dir)!r})"


def _to_log(line: str) -> None:
    """What `train_tagger` says: a record of the `tagger` logger (a library does not print; the application
    chooses where its log goes, as with flair's)."""
    log.info(line)


@contextlib.contextmanager
def _one_command():
    """Outside a command, what `nas.common.cli.Command` holds while one runs: the run directory's lock
    (one writer) and the guard on writes over files read (`nas.common.locks`, `nas.common.guard`)."""
    from nas.common import guard, locks

    with contextlib.ExitStack() as stack:
        if locks._held is None:
            stack.enter_context(locks.holding())
        if guard._noted is None:
            stack.enter_context(guard.guarding())
        yield
