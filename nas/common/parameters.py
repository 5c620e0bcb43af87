"""Equal-parameter comparisons: a layer's parameter count without allocating it, and the hidden
size at which another layer has the same count.

Both the language model (`nas.runs.train`: the LSTM baseline sized like a cell) and the tagger
(`tagger.sizing`: flair's BiLSTM sized like a cell, or a cell sized like a BiLSTM) compare
layers this way; each passes its own builder, so the count is that of the module it trains.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn as nn


def count_parameters(module: nn.Module) -> int:
    """Trainable numbers, a tied tensor counted once."""
    return sum(p.numel() for p in module.parameters())


def count_on_meta(build: Callable[[], nn.Module]) -> int:
    """The parameter count of the module `build()` makes, built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return count_parameters(build())


def closest_size(count: Callable[[int], int], target: int, smallest: int = 1, also: Iterable[int] = ()) -> int:
    """The size h ≥ `smallest` whose `count(h)` is closest to `target`.

    `count` must grow with h, except at the sizes in `also`, which are compared as well (the LM's
    LSTM drops its projection at nhid = emsize). A tie goes to the smaller size, so the matched
    layer never has more parameters than needed to tie.
    """
    low, high = smallest, smallest
    while count(high) < target:  # doubling, then bisection: O(log h) counts
        low, high = high + 1, 2 * high
    while low < high:  # the smallest h with count(h) ≥ target
        mid = (low + high) // 2
        low, high = (mid + 1, high) if count(mid) < target else (low, mid)
    candidates = sorted({high, max(smallest, high - 1), *also})
    return min(candidates, key=lambda h: (abs(count(h) - target), h))
