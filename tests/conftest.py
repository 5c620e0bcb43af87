"""Shared fixtures: small generated corpora, never the shared data."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest
import torch

# Tiny test tensors are much faster on one thread, and subprocesses inherit this through OMP_NUM_THREADS.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
# Tests never touch the network: Hugging Face's libraries read these on import, and tagger.embeddings keeps flair's
# names from downloading under them too (tests lay out the caches they need). Subprocesses inherit them.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto` (setup.cfg): a worker per CPU this process may run on (taskset, a container's cpuset), where xdist
    would count the machine's physical cores: each test runs one thread, and a 2-vCPU machine may be one core's two
    hyperthreads. $PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides as xdist documents (None: xdist's own count)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not hasattr(os, "sched_getaffinity"):
        return None
    return len(os.sched_getaffinity(0))


def write_lm_corpus(root: Path, seed: int = 0, train_lines: int = 300, other_lines: int = 60, vocab: int = 40) -> Path:
    """A tiny PTB-style corpus with some structure (repeated bigrams) so perplexity can fall."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", train_lines), ("valid", other_lines), ("test", other_lines)):
        lines = []
        for _ in range(n):
            start = rng.randrange(vocab)
            lines.append(
                " ".join(
                    words[(start + 3 * k) % vocab] if rng.random() < 0.8 else rng.choice(words)
                    for k in range(rng.randint(5, 12))
                )
            )
        (root / f"ptb.{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def lm_corpus(tmp_path: Path) -> Path:
    return write_lm_corpus(tmp_path / "corpus")


@pytest.fixture(scope="session")
def tiny_tagger(tmp_path_factory) -> tuple[Path, Path]:
    """(run directory, data directory) of a small tagger trained once per session on generated data."""
    from tagger_data import train_tiny_tagger

    return train_tiny_tagger(tmp_path_factory.mktemp("tiny-tagger"))


@pytest.fixture
def restore_flair_logging():
    """Commands run in-process (CliRunner) point flair's log at their own stderr and set its level; undo that."""
    import flair  # noqa: F401 - sets up the "flair" logger

    logger = logging.getLogger("flair")
    level, streams = logger.level, [(h, h.stream) for h in logger.handlers if isinstance(h, logging.StreamHandler)]
    yield
    logger.setLevel(level)
    for handler, stream in streams:
        handler.setStream(stream)


@pytest.fixture(params=["onednn", "mkl"])
def gemm_backend(request, monkeypatch):
    """Runs a test with oneDNN chosen for every shape (the fused loops' per-step weights packed), then torch.mm (MKL):
    which one a shape gets depends on the run's setting, the host and the shape (`nas.fast.gemm.prefers_onednn`,
    `packing_pays`), so both are tested."""
    from nas.fast import gemm

    monkeypatch.setattr(gemm.Gemm, "prefers_onednn", lambda self, rows, K, N, packed=True: request.param == "onednn")
    monkeypatch.setattr(gemm, "packing_pays", lambda counts, K, N: request.param == "onednn")
    return request.param


@pytest.fixture(params=["onednn", "mkl"])
def gemm_rule(request, monkeypatch):
    """Runs a test under each GEMM rule (`nas.fast.gemm.Gemm`), whatever the host's (`auto` gives oneDNN's on an
    AMD CPU with AVX-512, MKL's elsewhere), so one host runs what every host would: the rule's `Gemm`."""
    from nas.fast import gemm

    return gemm.Gemm(request.param)
