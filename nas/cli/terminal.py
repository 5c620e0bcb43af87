"""What the training commands (`bin/search-lm`, `bin/train-lm`) show while a loop runs: a progress
bar per epoch with tokens/s, one line per epoch, rollbacks, and exit 130 on Ctrl-C; and the progress
of the evaluating commands (`bin/eval-lm`, `bin/compare-words`)."""

from __future__ import annotations

import contextlib
import sys
import time
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
        self.bar = self.open.enter_context(
            click.progressbar(length=batches, label=self.label(loop), file=sys.stderr, item_show_func=lambda s: s)
        )
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
        click.echo(
            f"{problem}: rolled back to {loop.run_dir.checkpoint} (epoch {loop.epoch}, batch {loop.batch}); "
            f"rollback {loop.rollbacks} of at most {loop.max_rollbacks}",
            err=True,
        )

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


class StatusLine:
    """One line of progress on stderr, for work that can take minutes: on a terminal rewritten in place;
    otherwise (a log, a captured run) printed at most every EVERY seconds, so that short work prints none."""

    EVERY = 10.0
    REDRAW = 0.2  # seconds between rewrites of the terminal line

    def __init__(self) -> None:
        self.tty, self.shown = sys.stderr.isatty(), False
        self.started = self.last = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def due(self) -> bool:
        """Whether a line shown now would be drawn (the caller need not build it otherwise)."""
        return time.monotonic() - self.last >= (self.REDRAW if self.tty else self.EVERY)

    def show(self, line: str) -> None:
        if not self.due():
            return
        self.last = time.monotonic()
        if self.tty:
            sys.stderr.write(f"\r\033[K{line}")
            sys.stderr.flush()
            self.shown = True
        else:
            click.echo(line, err=True)

    def clear(self) -> None:
        """Erase the rewritten line before what comes next."""
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


class TokenProgress(StatusLine):
    """Tokens evaluated so far (bin/eval-lm, bin/compare-words: a long file at batch size 1 takes minutes)."""

    def __init__(self, label: str, steps: int, columns: int) -> None:
        super().__init__()
        self.label, self.steps, self.columns = label, steps, columns

    def tokens_done(self, done: int) -> None:
        """`done` of the `steps` (rows of `columns` tokens) are evaluated."""
        if self.due():
            tokens = done * self.columns
            self.show(
                f"{self.label}: {tokens:,} of {self.steps * self.columns:,} tokens ({done / self.steps:.0%}), "
                f"{tokens / max(self.elapsed(), 1e-9):,.0f} tok/s"
            )
