"""The allowed values of numeric settings, declared once: the configs check them in `validate()` for
library callers, and the commands turn the same declarations into click types (`nas.common.cli`), so a
flag out of range is refused while the command line is parsed.

Light on purpose (no click, no torch)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from .errors import InputError


@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers (None: unbounded on that side); every allowed number is finite."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the low end itself is not allowed
    high_open: bool = False
    integer: bool = False
    words: str | None = None  # how to say the range, when the interval alone says too little

    def describe(self) -> str:
        if self.words:
            return self.words
        low, high = self._say(self.low), self._say(self.high)
        if self.high is None:
            if self.low == 0:
                return "positive" if self.low_open else "non-negative"
            return f"{'above' if self.low_open else 'at least'} {low}"
        if self.low is None:
            return f"{'below' if self.high_open else 'at most'} {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def _say(self, bound: float | None) -> str:
        if bound is None:
            return ""
        return f"{bound:.0f}" if self.integer else f"{bound:g}"

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` (None: nothing; None is also what an unset optional setting is)."""
        if value is None:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        too_low = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        too_high = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        return f"must be {self.describe()}, got {value}" if too_low or too_high else None


AT_LEAST_1 = Range(1, integer=True)  # sizes and counts
NON_NEGATIVE_INT = Range(0, integer=True)
POSITIVE = Range(0, low_open=True)  # learning rates, clipping norms
NON_NEGATIVE = Range(0)  # weight decays, regularisation factors
RATE = Range(0, 1, high_open=True)  # dropout probabilities
FACTOR = Range(0, 1, low_open=True, high_open=True)  # a factor that must shrink what it multiplies
MINUTES = Range(0, low_open=True, words="a positive number of minutes")

# Upper limits, so that a number too large for the machine is refused before any work instead of
# dying in the allocator: far above what the papers use (sizes 300 to 1024, batches up to 256).
SIZE = Range(1, 8192, integer=True)  # embedding, hidden and vector sizes
BATCH = Range(1, 65536, integer=True)  # batch sizes and sequence lengths
NODES = Range(1, 32, integer=True)  # nodes of a cell or of a gate (DARTS 8, ENAS 12)
MANY = Range(1, 1_000_000, integer=True)  # counts of things made one by one (cells, seeds, candidates)
EPOCHS = Range(1, 1_000_000, integer=True)  # far above any schedule (DARTS retrains for 8000)
SEED = Range(0, 2**32 - 1, integer=True)  # numpy's and flair's seeds take no more (torch's would)
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = Range(1, CORES, integer=True, words=f"in [1, {CORES}], the cores of this machine")


def check_ranges(
    settings: Any, ranges: dict[str, Range], flag: Callable[[str], str] = lambda name: "--" + name.replace("_", "-")
) -> None:
    """The first attribute of `settings` outside its declared range, as an InputError naming its flag."""
    for name, allowed in ranges.items():
        problem = allowed.problem(getattr(settings, name))
        if problem:
            raise InputError(f"{flag(name)}: {problem}")
