"""Whole training steps replayed as CUDA graphs: one launch where eager PyTorch makes thousands.

A search step at a fixed sequence length runs the same kernels on tensors of the same shapes at
every batch. Launched one by one from Python (dozens of small kernels per node and time step), the
launches cost more than the GPU's work at the papers' size (batch 256, H = 300): the step is
launch-bound. `torch.cuda.graph` records the kernels once and replays them with one launch.

What a recording needs, and how `StepGraphs` provides it:
- fixed addresses: each call's input tensors are copied into the buffers the graph was recorded
  on; its outputs live in the graph's memory and are valid until the next call of the same
  `StepGraphs` (read or copy them before that: a carried hidden state is copied in as an input);
- no host synchronisation inside: the step function returns tensors (loss, gradient norm, hidden
  states) and the caller checks them after the replay;
- warm-up: the first `warmup` calls of a key run eagerly on a side stream, as real steps (the
  optimisers' states, cuBLAS workspaces and compiled kernels come into being there); the next call
  records the step and replays it;
- what the recording bakes in (Python floats such as a learning rate, which α group steps) is part
  of the caller's key; the input shapes are added to it here;
- tensors replaced behind a graph's back (an optimiser state loaded from a checkpoint) make its
  recording stale: `clear()` after any restore.
Dropout masks are drawn from the CUDA generator at every replay (PyTorch's graph-safe Philox offsets).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def usable(device: torch.device, parallel: bool) -> bool:
    """Whether whole steps can be recorded: on a CUDA device, in one process (no collectives inside)."""
    return device.type == "cuda" and not parallel


class StepGraphs:
    """Step functions recorded per key and replayed; see the module docstring for the contract."""

    def __init__(self, warmup: int = 2):
        self.warmup = warmup
        self._calls: dict[Hashable, int] = {}
        self._graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]] = {}
        self._pool = None  # one memory pool for all recordings: only one runs at a time

    def __call__(self, key: Hashable, step: Callable[..., Any], *inputs: Any) -> Any:
        flat, _ = tree_flatten(inputs)
        key = (key, tuple((tuple(t.shape), t.dtype) for t in flat))
        recorded = self._graphs.get(key)
        if recorded is None:
            calls = self._calls.get(key, 0)
            if calls < self.warmup:
                self._calls[key] = calls + 1
                return _on_side_stream(step, inputs)
            recorded = self._graphs[key] = self._record(step, inputs)
        graph, static, outputs = recorded
        for buffer, t in zip(static, flat):
            if buffer is not t:
                buffer.copy_(t)
        graph.replay()
        return outputs

    def _record(self, step: Callable[..., Any], inputs: tuple) -> tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]:
        flat, spec = tree_flatten(inputs)
        static = [t.clone() for t in flat]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = step(*tree_unflatten(static, spec))
        self._pool = graph.pool()
        return graph, static, outputs

    def recorded(self) -> int:
        """How many steps are recorded (a log line's detail)."""
        return len(self._graphs)

    @staticmethod
    def make_capturable(optimizer: torch.optim.Optimizer) -> None:
        """Let an optimiser with a `capturable` mode (Adam, ASGD) step inside a recording: its step counters
        and scalars on the parameters' device. Needed after construction and after every `load_state_dict`,
        which restores the saved groups' flags and keeps the counters on the CPU."""
        for group in optimizer.param_groups:
            if "capturable" not in group:
                continue
            group["capturable"] = True
            for p in group["params"]:
                state = optimizer.state.get(p, {})
                for name, value in state.items():
                    if torch.is_tensor(value) and value.device != p.device:
                        state[name] = value.to(p.device)

    def clear(self) -> None:
        """Forget every recording (after a restore replaced tensors the recordings read)."""
        self._graphs.clear()
        self._calls.clear()
        self._pool = None


def _on_side_stream(step: Callable[..., Any], inputs: tuple) -> Any:
    """An eager call on a side stream, as PyTorch's recipe warms up a step before recording it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outputs = step(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    return outputs
