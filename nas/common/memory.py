"""Process memory: glibc's malloc kept from handing freed blocks back to the system between steps,
and long-lived objects kept out of the cyclic garbage collector's way."""

from __future__ import annotations

import ctypes
import gc
from contextlib import contextmanager
from typing import Iterator

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def keep_freed_memory(limit: int = 1 << 30) -> None:
    """Have glibc's malloc reuse freed blocks of up to `limit` bytes instead of mapping fresh pages.

    A training step allocates and frees blocks of 100 to 200 MB (the fused search cell's saved
    activations, the 10k-word logits and their gradient). By default glibc maps each one anew and
    returns it on free, and the page faults are a large share of a search step on a
    CPU (figures in docs/speed.md). The price is that up to `limit` of freed memory stays with the process.
    Without glibc nothing changes."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(limit))
        libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(limit))
    except (OSError, AttributeError):
        pass


@contextmanager
def long_lived_frozen(full_collection: bool = True) -> Iterator[None]:
    """Leave the objects alive now out of the cyclic garbage collector until the block ends.

    A loaded tagger holds hundreds of thousands of objects the collector tracks (flair's embeddings
    and vocabularies, torch's modules), and tagging creates and drops many small ones (sentences,
    tokens, tensors), so the collector's full collections, each walking every tracked object, were a
    large share of a prediction's time (docs/speed.md). Frozen objects are still freed by reference
    counting; only cycles among them wait for the end of the block, where they rejoin the oldest
    generation.

    The block starts with a full collection, so that no garbage is frozen with them; without
    `full_collection` only the young generations are collected, which is what a command that has
    just loaded a model wants: the full collection found nothing there and took 0.2-0.4 s of its
    start-up (docs/speed.md, "Start-up")."""
    gc.collect() if full_collection else gc.collect(1)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
