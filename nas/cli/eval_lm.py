"""`bin/eval-lm`: perplexity of a model saved by `bin/train-lm`, on a split of a corpus or a text file."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nas.common.cli import BATCH_SIZE, DEVICE, THREAD_COUNT, command, require_stdout, use_threads
from nas.common.errors import InputError
from nas.common.splits import SPLITS, find_splits


@command()
@click.argument("model", type=click.Path())
@click.option(
    "--data", type=click.Path(), help="Corpus directory holding the split (ptb.test.txt, wiki.test.tokens, ...)."
)
@click.option("--split", type=click.Choice(SPLITS), default="test")
@click.option(
    "--file",
    "text_file",
    type=click.Path(),
    help="Evaluate this text file (one sentence per line) instead of a split of --data.",
)
@click.option(
    "--batch-size",
    type=BATCH_SIZE,
    default=None,
    help="[default: the run's test batch size (1) for test, its validation batch size (10) otherwise]",
)
@click.option(
    "--bptt",
    type=BATCH_SIZE,
    default=None,
    help="Chunk length; the hidden state is carried across chunks [default: the run's bptt].",
)
@click.option("--device", type=DEVICE, default="cpu")
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
def main(model, data, split, text_file, batch_size, bptt, device, threads) -> None:
    """Print the perplexity of MODEL (a train-lm run directory, whose best.pt is used, or a model file) as one JSON
    line.

    Example:

    \b
        bin/eval-lm runs/dartsv2 --data data/ptb --split test
    """
    from nas.common.files import require_file
    from nas.lm.corpus import batchify, encode, read_tokens
    from nas.common.stats import ppl
    from nas.lm.evaluation import evaluate
    from nas.runs.train import load_for_evaluation
    from .terminal import TokenProgress

    require_stdout("the perplexity")
    if text_file is not None:  # --file replaces the split of --data: either of those with it would be ignored
        ctx = click.get_current_context()
        for name in ("data", "split"):
            if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
                raise InputError(f"--{name}: not with --file (it picks a split of --data, which --file replaces)")
    use_threads(threads)
    path = _model_file(model)
    lm, stored = load_for_evaluation(path, device)
    config = stored.get("config", {})
    if text_file is not None:
        source = Path(text_file)
        require_file(source, "--file")
    elif data is not None:
        source = find_splits(data, needed=(split,))[split]
    else:
        raise InputError("nothing to evaluate: give --data DIR (with --split) or --file FILE")
    default_batch = config.get("test_batch_size", 1) if split == "test" else config.get("eval_batch_size", 10)
    batch_size = batch_size if batch_size is not None else default_batch
    bptt = bptt if bptt is not None else config.get("bptt", 35)
    ids = encode(read_tokens(source), stored["vocab"])
    batches = batchify(ids, batch_size, 1, source, "--batch-size").to(device)
    progress = TokenProgress(f"evaluating {source}", batches.size(0) - 1, batches.size(1))
    nll = evaluate(lm, batches, bptt, on_chunk=progress.tokens_done)
    progress.clear()
    report = {
        "model": str(path),
        "file": str(source),
        "split": None if text_file else split,
        "ppl": ppl(nll),
        "nll": nll,
        "tokens": (batches.size(0) - 1) * batches.size(1),
        "batch_size": batch_size,
        "bptt": bptt,
    }
    click.echo(json.dumps(report))


def _model_file(model: str) -> Path:
    """MODEL's file: itself, or a run directory's best.pt (with a warning while its training has not finished)."""
    path = Path(model)
    if path.is_dir():
        path = path / "best.pt"
        if not path.is_file():
            raise InputError(f"{model}: no best.pt (not a bin/train-lm run directory, or no epoch has finished yet)")
        if not (Path(model) / "metrics.json").is_file():
            click.echo(
                f"warning: {model}: its training has not finished (killed, or still running): best.pt is "
                f"the best model so far (continue it with bin/train-lm --resume {model})",
                err=True,
            )
    return path


if __name__ == "__main__":
    main()
