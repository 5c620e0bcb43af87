"""flair's and torch's process-wide settings, made before a model or embedding is built: flair's log on
stderr (stdout holds a command's result), flair's device and torch's CPU threads.

flair and torch load inside these functions, when the work starts, never on import."""

from __future__ import annotations

import logging
import sys


def flair_logs_to_stderr(level: int = logging.INFO) -> None:
    """flair logs to stdout; send it to stderr so stdout holds only the command's result. Commands
    that only predict take WARNING, which drops flair's note on every model load."""
    import flair  # noqa: F401 - configures the "flair" logger on import

    logger = logging.getLogger("flair")
    logger.setLevel(level)
    for handler in logger.handlers:
        if type(handler) is logging.StreamHandler:
            handler.setStream(sys.stderr)


def use_device(device: str, threads: int | None = None) -> None:
    """flair's device (checked when the flag was parsed) and torch's CPU threads (None: torch's choice)."""
    import flair
    import torch

    from nas.common.cli import use_threads

    flair.device = torch.device(device)
    use_threads(threads)
