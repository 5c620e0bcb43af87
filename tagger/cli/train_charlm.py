"""`bin/train-charlm`: a forward or backward character LM for Flair embeddings, offline."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from nas.common.cli import (
    BATCH_SIZE,
    COUNT,
    EPOCH_COUNT,
    DEVICE,
    LAYER_SIZE,
    RUN_FOLDER,
    SEED_VALUE,
    THREAD_COUNT,
    bounded,
    command,
    command_line,
    config_option,
    use_threads,
)
from nas.common.errors import InputError
from nas.common.ranges import MINUTES, POSITIVE


@command()
@click.option(
    "--data",
    required=True,
    type=click.Path(),
    help="A text file, or a directory with train/valid/test splits (e.g. data/wikitext-2).",
)
@click.option("--direction", type=click.Choice(["forward", "backward"]), required=True)
@click.option("--run-dir", required=True, type=RUN_FOLDER, help="Run directory; the model is RUN_DIR/best-lm.pt.")
@click.option("--hidden", type=LAYER_SIZE, default=256, help="LSTM hidden size (256 keeps the file under 5 MB).")
@click.option("--embedding", type=LAYER_SIZE, default=100, help="Character embedding size.")
@click.option("--epochs", type=EPOCH_COUNT, default=None, help="Passes over the train splits.")
@click.option(
    "--time-budget",
    type=bounded(MINUTES),
    default=None,
    help="Minutes; training stops then and keeps the best model so far.",
)
@click.option("--seq-len", type=COUNT, default=250, help="Characters per truncated-BPTT sequence (flair's default).")
@click.option("--batch-size", type=BATCH_SIZE, default=100)
@click.option("--lr", type=bounded(POSITIVE), default=20.0, help="SGD learning rate (flair's default).")
@click.option(
    "--split-chars",
    type=COUNT,
    default=2_000_000,
    help="Characters per train split; flair validates and keeps the best model after each.",
)
@click.option("--seed", type=SEED_VALUE, default=1)
@click.option(
    "--device",
    type=DEVICE,
    default=None,
    help="[default: cuda where CUDA is available (flair's trainer refuses the CPU there), else cpu]",
)
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
@config_option("bin/train-charlm")
def main(
    data,
    direction,
    run_dir,
    hidden,
    embedding,
    epochs,
    time_budget,
    seq_len,
    batch_size,
    lr,
    split_chars,
    seed,
    device,
    threads,
) -> None:
    """Train a character language model with flair's LanguageModelTrainer, offline.

    The .pt plugs into `bin/train-tagger --embeddings flair:FWD.pt:BWD.pt` (or pooled-flair:).

    \b
        bin/train-charlm --data data/wikitext-2 --direction forward --run-dir charlm-fwd --time-budget 20
    """
    from nas.common.paths import absolute

    if epochs is None and time_budget is None:
        raise InputError("give --epochs N or --time-budget MIN")
    use_threads(threads)
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = {
        "data": str(absolute(data)),
        "direction": direction,
        "hidden": hidden,
        "embedding": embedding,
        "epochs": epochs,
        "time_budget": time_budget,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "lr": lr,
        "split_chars": split_chars,
        "seed": seed,
        "device": device,
        "command": command_line("bin/train-charlm"),
    }
    result = _train(data, run_dir, settings)
    _write_provenance(run_dir, settings, result)
    click.echo(
        f"{Path(run_dir) / 'best-lm.pt'}: validation {result['valid_bpc']:.3f} bits per character, "
        f"{result['size_bytes'] / 1e6:.1f} MB"
    )


def _train(data: str, run_dir: str, settings: dict) -> dict:
    """The character LM of `settings` (config.json, written first) trained on `data` into `run_dir`; a run that
    fails before its first model leaves nothing half-made."""
    from nas.common.files import atomic_write_json
    from nas.common.runs import RunDir

    from ..charlm import train_charlm

    run = RunDir(run_dir)
    run.claim()
    try:
        atomic_write_json(run.path / "config.json", settings)
        named = {name: value for name, value in settings.items() if name not in ("data", "seq_len", "command")}
        return train_charlm(data, run_dir, sequence_length=settings["seq_len"], **named)
    except BaseException:
        if not (run.path / "best-lm.pt").is_file():
            run.discard()
        raise


def _write_provenance(run_dir: str, settings: dict, result: dict) -> None:
    """provenance.json beside the model: how it was made, what it scored, when."""
    from nas.common.files import atomic_write_json

    provenance = {
        "command": settings["command"],
        "corpus": settings["data"],
        "direction": settings["direction"],
        "hidden": settings["hidden"],
        "epochs": settings["epochs"],
        "time_budget_min": settings["time_budget"],
        **result,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(Path(run_dir) / "provenance.json", provenance)


if __name__ == "__main__":
    main()
