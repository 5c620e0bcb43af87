"""Process memory: glibc's malloc kept from handing freed blocks back to the system between steps."""
from __future__ import annotations

import ctypes

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
