"""Set-up shared by the tagger commands before any model or embedding is built: no download where a
command only loads saved models, and from `tagger.flair_runtime` (which `tagger.train_tagger` uses too)
stdout kept for the command's result, the device and thread count.

flair and torch load inside these functions, when a command's work starts, never on import."""

from __future__ import annotations

import os
from pathlib import Path

from ..flair_runtime import flair_logs_to_stderr, use_device

__all__ = ["flair_logs_to_stderr", "offline", "run_config", "use_device", "warn_if_unfinished"]


def offline() -> None:
    """For the commands that load saved models (which hold their transformers whole): Hugging Face libraries
    never reach for the network. The commands that build embeddings from names do not call it: those resolve
    through flair's and Hugging Face's caches and downloads (`tagger.embeddings`)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def warn_if_unfinished(tagger, model: str) -> None:
    """One line on stderr when the model was saved by a training that has not finished (killed, or still running)."""
    import click

    from ..resume import is_complete

    if not is_complete(tagger):
        epoch = ((tagger.model_card or {}).get("training_parameters") or {}).get("epoch")
        after = f" after epoch {epoch}" if epoch else ""
        click.echo(
            f"warning: {model}: saved{after} by a training that has not finished (continue it with "
            "bin/train-tagger --resume RUN_DIR)",
            err=True,
        )


def run_config(model: Path, corpus: str | None = None) -> dict:
    """The config.json of the run that trained the model (beside it, or one level up for --runs),
    when that run used this corpus format (or none is given); {} otherwise."""
    from nas.common.files import read_json
    from nas.common.ranges import check_stored

    from ..config import TaggerConfig

    folder = model if model.is_dir() else model.parent
    for candidate in (folder / "config.json", folder.parent / "config.json"):
        if candidate.is_file():
            config = read_json(candidate)
            if not isinstance(config, dict):
                return {}
            check_stored(
                TaggerConfig, config, str(candidate), TaggerConfig.CHOICES, TaggerConfig.RANGES
            )  # before any is used
            return config if corpus in (None, config.get("corpus")) else {}
    return {}
