"""I-DARTS (Jiang et al. 2019, Eq. 4): one softmax over all (edge, op) pairs entering a node; `top_n` inputs kept per node."""
from __future__ import annotations

from .darts import Darts


class IDarts(Darts):
    normalisation = "idarts"
