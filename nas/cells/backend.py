"""What a model asks of its backend, and the plain-torch answer: the models' side of the one dispatch point.

The cells (`nas.cells.cell`, `nas.cells.search_cell`, `nas.cells.gates`) are the definition, op by op
through autograd. A fast path reaches them only as a `CellBackend` object, chosen once per run, that
whoever builds the model injects as the `backend` attribute of every module that has one (`nas.speed.attach`:
the cells and gates, and the layers around them that run on the run's GEMM rule or loss, e.g. the language
model's decoder); None, the default, is `DEFINITION`, the plain-torch answer to every question below. The
cells import nothing from `nas.fast`. A cell hook either runs the part asked for or returns None, and the
cell then runs its own code. The training loops ask the same object whether they record whole steps as CUDA
graphs (`captures`, `step_graphs`).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F


class StepProduct(Protocol):
    """A weight W multiplied at every time step, as a fast path holds it: `matmul(x)` is x·W."""

    def matmul(self, x: torch.Tensor) -> torch.Tensor: ...


def times(x: torch.Tensor, w: torch.Tensor | StepProduct) -> torch.Tensor:
    """x·W, for a plain weight (the definition) or a backend's `StepProduct`."""
    return torch.matmul(x, w) if isinstance(w, torch.Tensor) else w.matmul(x)


class CellBackend(Protocol):
    """The questions a model asks of the backend it was given; `nas.fast.backends` holds the answers."""

    name: str

    def projection(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """F.linear for a layer outside the cells (the LM's decoder, the tagger's reprojection), on the run's
        GEMM rule."""

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The language model's loss: mean `F.cross_entropy` over the rows."""

    def captures(self, device: torch.device, parallel: bool) -> bool:
        """Whether the training loops record whole steps as CUDA graphs and replay them (`step_graphs`)."""

    def step_graphs(self) -> Callable:
        """A recorder of whole steps (`nas.fast.graphs.StepGraphs`: called as (key, step, *inputs)), where
        `captures`."""

    def step_weight(self, weight: torch.Tensor) -> torch.Tensor | StepProduct:
        """W as the time loop multiplies by it at every step (`times`)."""

    def time_step(self, step: Callable, dynamic: bool = False) -> Callable:
        """The function the time loop calls per step in place of `step` (e.g. compiled); `dynamic`: the
        batch shrinks from step to step (a padded batch whose shorter sequences have ended)."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x·Wᵀ over a whole sequence (the search cell's input projection)."""

    def frozen_loop(
        self,
        rnn: nn.Module,
        batch: Any,
        x: torch.Tensor,
        h: torch.Tensor,
        mx: torch.Tensor | None,
        mh: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """A `FrozenRNN`'s whole time loop over its `PaddedBatch` (packed outputs, as `PaddedBatch.unpack`
        reads them), or None."""

    def search_loop(
        self,
        rnn: nn.Module,
        x: torch.Tensor,
        h: torch.Tensor,
        history: tuple | None,
        mx: torch.Tensor | None,
        mh: torch.Tensor | None,
    ) -> tuple | None:
        """A `SearchRNN`'s whole time loop over x from h (and its gates' `history`) under its dropout masks,
        (outputs, last h, history), or None."""

    def gate_nodes(
        self, gate: nn.Module, e: list[torch.Tensor], w_node: list, weights: torch.Tensor
    ) -> torch.Tensor | None:
        """An ESS `SearchGate`'s DAG over the projected history vectors `e`, or None."""


class Definition:
    """The plain-torch answer to every hook: the cells' own code runs everything."""

    name = "torch"

    def step_weight(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def time_step(self, step: Callable, dynamic: bool = False) -> Callable:
        return step

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

    def projection(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, weight, bias)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)

    def captures(self, device: torch.device, parallel: bool) -> bool:
        return False

    def frozen_loop(self, rnn, batch, x, h, mx, mh) -> None:
        return None

    def search_loop(self, rnn, x, h, history, mx, mh) -> None:
        return None

    def gate_nodes(self, gate, e, w_node, weights) -> None:
        return None


DEFINITION = Definition()
