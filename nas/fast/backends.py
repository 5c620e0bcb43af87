"""The one dispatch point: a run's backend, the one object that owns its fast paths, its GEMM rule and
its graph capture, chosen by name for a device.

A backend answers the hooks of `nas.cells.backend.CellBackend` (the cells import nothing from here);
whoever builds a model injects one into it (`attach`, through `nas.speed`). Its GEMM rule (`gemm`, a
`nas.fast.gemm.Gemm` of `--gemm`) runs the fused paths' products and the model's other linear layers
(`projection`: the LM's decoder, the tagger's reprojection) whatever runs the cells; the training loops
ask it whether they record whole steps (`captures`, `step_graphs`). The names, as `--backend` takes them:

- `torch`: the definition, op by op through autograd, on any device (`nas.cells.backend.Definition`);
  with `compiled` (search-lm's `--compile`), each time step through torch.compile.
- `cpu-fused`: CPU only: the fused loops with hand-written backwards (`frozen_loop`, `search_loop`,
  `gate_dag`, their elementwise passes in C++, `kernels`), the per-step weights as `StepWeight`s,
  and the language model's loss on C++ kernels (`cross_entropy`). Each hook falls back, per call, to the
  definition outside what it supports (autocast, a batch of one, a GPU tensor, gates for the frozen
  loop, an op the kernels do not know, evaluation for the search loop, the C++ kernels not built: one
  warning line).
- `cuda-graphs`: CUDA only (and Triton, torch.compile's GPU code generator): each cell's time step
  through torch.compile (the frozen cell's with a dynamic batch, which shrinks as sentences end), and
  `captures`: the training loops capture whole steps as CUDA graphs (`nas.fast.graphs`).
- `cuda-loop`: `cuda-graphs`, with the frozen cell's whole time loop as two Triton kernels, one launch
  per pass (`triton_loop`), where they apply; the tagger's layer. Not yet `auto`'s choice: it waits
  for a measurement on a GPU (docs/speed.md).
- `auto`: `cpu-fused` on a CPU, `cuda-graphs` on CUDA where Triton imports, else `torch`.

A command resolves its flags once (`resolve`, `nas.fast.gemm.resolve`, before any work) and records the
resolved names in config.json; the model builders (`nas.lm.model_file.build_lm`,
`nas.runs.search_model.build_search_model`, `tagger.train.build_model`) `attach` the run's backend, chosen
once from those settings (`choose`, `nas.speed.of`), and `tagger.model`'s loaders `for_prediction`'s. Nothing
is process-wide. A library caller that gives `build_lm` no backend gets `auto`'s for a CPU.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator

import torch
import torch.nn as nn

from nas.cells.backend import Definition
from nas.cells.cell import FrozenRNN
from nas.cells.gates import FrozenGate, SearchGate
from nas.cells.ops import OPS
from nas.cells.recurrence import input_gate, run_recurrence
from nas.cells.search_cell import SearchRNN
from nas.common.devices import auto_backend, backend_problem
from nas.common.errors import InputError
from . import frozen_loop, gate_dag, gemm, graphs, kernels, search_loop, triton_loop
from .cross_entropy import cross_entropy as kernels_cross_entropy
from .gemm import Gemm
from .step_weights import StepWeight

CELLS = (FrozenRNN, SearchRNN, SearchGate, FrozenGate)  # the modules whose code a backend may replace


class Torch(Definition):
    """The definition; `compiled`: each time step through torch.compile. The model's other products (the
    LM's decoder, the tagger's reprojection) on the GEMM rule `gemm`."""

    name = "torch"
    captures_steps = False  # whether the training loops capture whole steps as CUDA graphs

    def __init__(self, compiled: bool = False, gemm: Gemm = Gemm()):
        self.compiled, self.gemm = compiled, gemm

    def time_step(self, step: Callable, dynamic: bool = False) -> Callable:
        return _compiled(step, dynamic) if self.compiled else step

    def projection(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.gemm.linear(x, weight, bias)

    def captures(self, device: torch.device, parallel: bool) -> bool:
        return self.captures_steps and graphs.usable(device, parallel)

    def step_graphs(self) -> graphs.StepGraphs:
        return graphs.StepGraphs()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(compiled={self.compiled}, gemm={self.gemm.rule})"

    def __reduce__(self):
        return Torch, (self.compiled, self.gemm)


class CudaGraphs(Torch):
    """CUDA: compiled time steps, whole training steps captured as CUDA graphs by the loops."""

    name = "cuda-graphs"
    captures_steps = True

    def __init__(self, gemm: Gemm = Gemm()):
        super().__init__(compiled=True, gemm=gemm)

    def __reduce__(self):
        return type(self), (self.gemm,)


class CudaLoop(CudaGraphs):
    """`cuda-graphs`, and the frozen cell's whole time loop as two Triton kernels (`triton_loop`) where they
    apply: float32 without gates, outside autocast, over the ops they know (under TRITON_INTERPRET=1 they
    run on a CPU too, for the tests)."""

    name = "cuda-loop"

    def frozen_loop(self, rnn: FrozenRNN, batch, x, h, mx, mh) -> torch.Tensor | None:
        plan = _frozen_plan(rnn, x, triton_loop.runs_on(x))
        if plan is None:
            return None
        return frozen_loop.fused_frozen_cell(
            batch.packed_inputs(x, mx), h, rnn.w0, rnn.ws, mh, plan, batch.counts, steps=triton_loop.STEPS
        )


class CpuFused(Definition):
    """The CPU's fused loops, C++ kernels and the GEMM rule `gemm`; the definition wherever they do not apply."""

    name = "cpu-fused"
    captures_steps = False
    compiled = False

    def __init__(self, gemm: Gemm = Gemm()):
        self.gemm, self.steps = gemm, frozen_loop.CpuSteps(gemm)

    def step_weight(self, weight: torch.Tensor) -> StepWeight:
        return StepWeight(weight, self.gemm)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """On the C++ kernels where they apply (float32/64 on a CPU, outside autocast)."""
        return kernels_cross_entropy(logits, targets)

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.gemm.linear(x, weight)

    def projection(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.gemm.linear(x, weight, bias)

    def frozen_loop(self, rnn: FrozenRNN, batch, x, h, mx, mh) -> torch.Tensor | None:
        """Without gates, on a CPU with the C++ kernels built, outside autocast, over the ops the loop knows."""
        plan = _frozen_plan(rnn, x, kernels.with_kernels(x))  # it warns once without them
        if plan is None:
            return None
        counts = batch.counts
        # formed again only when w0 or ws changed (an optimiser step, a load) or the batch size did:
        # prediction reuses them from batch to batch
        weights = _packed_cache(rnn).get(
            (rnn.w0, rnn.ws),
            lambda: self.steps.weights(plan, rnn.w0[:, rnn.ninp :], rnn.ws, counts),
            tag=counts[0],
        )
        return frozen_loop.fused_frozen_cell(
            batch.packed_inputs(x, mx), h, rnn.w0, rnn.ws, mh, plan, counts, self.steps, weights
        )

    def search_loop(self, rnn: SearchRNN, x, h, history, mx, mh) -> tuple | None:
        """In training: without gates, and with `project` gates, the whole loop as one Function; with `pad`
        gates, the Function one step at a time (x_t's projection needs h_{t-1..t-m})."""
        if not search_fusable(rnn, x):
            return None
        xin = x if mx is None else x * mx
        w0x, w0h = rnn.input_weights()
        B = x.size(1)
        mix, ws = rnn.mixing_weights()[:, 1:], torch.stack(list(rnn.ws))  # `none` adds nothing
        # packed once for a search step's two forwards (α and weights), which see the same weights
        packed = _packed_cache(rnn).get(
            (rnn.w0, *rnn.ws), lambda: search_loop.loop_weights(self.gemm, w0h, ws, B), tag=B
        )
        if rnn.inter is None:
            out = search_loop.fused_search_cell(self.linear(xin, w0x.t()), h, w0h, ws, mix, mh, rnn.bn, packed)
            return out, out[-1], None
        if rnn.inter.size_match == "project":  # g′'s products and the cell's steps: the whole loop in C++
            x_hist, h_hist = history
            m = h_hist.size(0)
            f, xs = input_gate(rnn.inter, x, x_hist, x.size(0))
            out = search_loop.fused_gated_search_cell(
                xin, h, h_hist, f, w0x, w0h, ws, mix, rnn.inter.g, mh, rnn.bn, packed
            )
            return out, out[-1], (xs.flip(0)[:m], torch.cat([out.flip(0), h_hist])[:m])
        stats = search_loop.RunningStats(rnn.bn)
        xsteps = xin.unbind(0)

        def step(t: int, x_gate: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            xp = (xsteps[t] * x_gate) @ w0x
            return search_loop.fused_search_cell(xp.unsqueeze(0), h, w0h, ws, mix, mh, rnn.bn, packed, stats)[0]

        out = run_recurrence(step, h, x.size(0), rnn.inter, x, history)
        stats.update()
        return out

    def gate_nodes(self, gate: SearchGate, e, w_node, weights) -> torch.Tensor | None:
        """In training (evaluation, where the search's Hessian eigenvalue takes a second derivative, stays on
        autograd, as the search cell does)."""
        if not (gate.training and gate_dag.supports(e[0])):
            return None
        w_node = [w if isinstance(w, StepWeight) else StepWeight(w, self.gemm) for w in w_node]
        return gate_dag.mixed_gate(e, w_node, weights[:, 1:], gate.squash)

    def __repr__(self) -> str:
        return f"CpuFused(gemm={self.gemm.rule})"

    def __reduce__(self):
        return CpuFused, (self.gemm,)


Backend = Torch | CpuFused | CudaGraphs | CudaLoop


def search_fusable(rnn: SearchRNN, x: torch.Tensor) -> bool:
    """Whether `CpuFused.search_loop` runs this forward: a training forward with gradients, on a CPU in
    float32/64 outside autocast, a batch of more than one, every state under the cell's own BatchNorm (not
    the data-parallel synced ones; a drawn cell of random search or ENAS has none), and the C++ kernels
    built (else one warning line)."""
    plain_norms = all(type(bn) is nn.BatchNorm1d and isinstance(bn.momentum, float) for bn in rnn.bn)
    return (
        rnn.training
        and torch.is_grad_enabled()
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and x.size(1) > 1
        and not torch.is_autocast_enabled(x.device.type)
        and plain_norms
        and search_loop.supports(OPS)
    )  # the last: it warns


def _frozen_plan(rnn: FrozenRNN, x: torch.Tensor, runs_here: bool) -> frozen_loop.Plan | None:
    """The fused loop's plan of the layer's genotype where a fused loop runs this call: `runs_here` (the
    backend's device and dtype rule), without gates, outside autocast, over ops the loop knows (the plan
    made once); else None."""
    if not runs_here or rnn.inter is not None or torch.is_autocast_enabled(x.device.type):
        return None
    state = rnn.backend_state
    if "plan" not in state:
        ops = {op for node in rnn.genotype.nodes for op, _ in node}
        state["plan"] = (
            frozen_loop.plan(rnn.waves, rnn.genotype.concat, rnn.genotype.steps) if frozen_loop.supports(ops) else None
        )
    return state["plan"]


def _packed_cache(layer: nn.Module) -> gemm.PackedCache:
    """The layer's loop weights packed, kept while the weights are unchanged."""
    state = layer.backend_state
    if "packed" not in state:
        state["packed"] = gemm.PackedCache()
    return state["packed"]


@functools.cache
def _compiled(step: Callable, dynamic: bool) -> Callable:
    """`step` through torch.compile (inductor fuses each node's elementwise ops, forward and backward)."""
    return torch.compile(step, dynamic=dynamic)


def resolve(name: str, device: str | torch.device, compile: bool = False) -> str:
    """The backend `name` means on `device`: itself, or for `auto` the device's (`nas.common.devices`, the one
    place that says which backends suit a device). Raises InputError (one line) where it cannot run there."""
    if name == "auto":
        return auto_backend(str(device), compile)
    why = backend_problem(name, str(device), compile)
    if why is not None:
        raise InputError(why)
    return name


def choose(name: str, device: str | torch.device, compile: bool = False, gemm_rule: str = "auto") -> Backend:
    """The backend object of `name` (or `auto`) for `device`, its products on GEMM rule `gemm_rule` (`onednn`,
    `mkl`, or `auto`: the host's, `nas.fast.gemm.host_backend`): a run's, chosen once from its settings."""
    resolved, rule = resolve(name, device, compile), Gemm(gemm.resolve(gemm_rule))
    if resolved == "cpu-fused":
        return CpuFused(rule)
    if resolved == "cuda-graphs":
        return CudaGraphs(rule)
    if resolved == "cuda-loop":
        return CudaLoop(rule)
    return Torch(compiled=compile, gemm=rule)


def for_prediction(device: str | torch.device, gemm_rule: str = "auto") -> Backend:
    """What a saved tagger is loaded onto (`tagger.model`'s loaders, for bin/tag, bin/evaluate and a training
    run's scoring of its own file alike): `auto`'s backend on a CPU; on a GPU the definition, uncompiled,
    as compiling a time step costs tens of seconds on its first call (87 s for bench/birnn.py's BiRNN on an
    H200), more than tagging a file takes."""
    if torch.device(device).type == "cpu":
        return choose("auto", device, gemm_rule=gemm_rule)
    return Torch(gemm=Gemm(gemm.resolve(gemm_rule)))


def attach(model: nn.Module, backend: Backend) -> nn.Module:
    """Injects `backend` into every module of `model` that asks one (a `backend` attribute: the cells and
    gates, and the model's layers on its GEMM rule, e.g. the language model's decoder)."""
    for module in model.modules():
        if hasattr(module, "backend"):
            module.backend = backend
    return model


def detach(model: nn.Module) -> nn.Module:
    """Every cell and gate of `model` back on the definition (backend None)."""
    for module in model.modules():
        if isinstance(module, CELLS):
            module.backend = None
    return model


@contextlib.contextmanager
def on_definition(model: nn.Module) -> Iterator[nn.Module]:
    """`model`'s cells and gates on the definition for a while, then back on their backends: for what
    differentiates twice (the Hessian of the search's health check), which torch.compile's steps cannot."""
    kept = [(m, m.backend) for m in model.modules() if isinstance(m, CELLS)]
    try:
        yield detach(model)
    finally:
        for module, backend in kept:
            module.backend = backend
