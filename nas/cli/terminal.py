"""What the training commands (`bin/search-lm`, `bin/train-lm`) show while a loop runs: a progress
bar per epoch with tokens/s, one line per epoch, rollbacks, and exit 130 on Ctrl-C."""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable

import click

from nas.common.runs import Interrupted
from nas.runs.loop import Progress, TrainingLoop


class Terminal(Progress):
    """A click progress bar on stderr for each epoch's batches, then `line(loop, record)` for the epoch."""

    def __init__(self, label: Callable[[TrainingLoop], str], line: Callable[[TrainingLoop, dict], str]):
        self.label, self.line = label, line
        self.bar = None
        self.open = contextlib.ExitStack()

    def epoch_started(self, loop: TrainingLoop, batches: int) -> None:
        self._close()
        self.bar = self.open.enter_context(click.progressbar(length=batches, label=self.label(loop), file=sys.stderr,
                                                             item_show_func=lambda s: s))
        self.bar.update(loop.batch)

    def batch_done(self, loop: TrainingLoop) -> None:
        t = loop.totals
        self.bar.update(1, f"{t['tokens'] / max(t['seconds'], 1e-9):,.0f} tok/s")

    def batches_ended(self, loop: TrainingLoop) -> None:
        self._close()

    def epoch_done(self, loop: TrainingLoop, record: dict) -> None:
        click.echo(self.line(loop, record), err=True)

    def rolled_back(self, loop: TrainingLoop, problem: str) -> None:
        self._close()
        click.echo(f"{problem}: rolled back to {loop.run_dir.checkpoint} (epoch {loop.epoch}, batch {loop.batch}); "
                   f"rollback {loop.rollbacks} of at most {loop.max_rollbacks}", err=True)

    def _close(self) -> None:
        self.open.close()
        self.bar = None


def run_loop(loop: TrainingLoop, terminal: Terminal) -> Any:
    """`loop.run()` shown on `terminal`; Ctrl-C (after the loop's checkpoint) exits 130 with one line."""
    try:
        with terminal.open:
            return loop.run(terminal)
    except Interrupted as stop:
        click.echo(f"interrupted: {stop}", err=True)
        sys.exit(130)
