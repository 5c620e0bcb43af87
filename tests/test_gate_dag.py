"""The ESS search gate's DAG on its C++ kernels (`nas.fast.gate_dag`) against the same gate op by op
through autograd (`SearchGate.backend = None`): outputs and every gradient, whole-sequence and step by step."""

import pytest
import torch

from nas.cells.gates import SearchGate
from nas.fast import gate_dag
from nas.fast.backends import CpuFused
from nas.fast.gemm import Gemm
from nas.fast.kernels import compiled
from nas.methods.darts import Darts

ONEDNN = Gemm("onednn")  # the fused paths' rule that takes oneDNN where this torch has it (and the shape asks)

pytestmark = pytest.mark.skipif(compiled() is None, reason="the C++ kernels are not built")

# (history m, nodes N, squash, size matching): m < N and m = N, every squash, both size matchings
GATES = [
    (1, 2, "sigmoid", "project"),
    (2, 3, "2sigmoid", "project"),
    (3, 3, "none", "project"),
    (2, 4, "sigmoid", "pad"),
]


def _gate(m: int, nodes: int, squash: str, match: str) -> SearchGate:
    torch.manual_seed(0)
    gate = SearchGate(m, nodes, d_src=5, d_gate=6, rule=Darts.rule, squash=squash, size_match=match).double()
    gate.backend = CpuFused(ONEDNN)
    with torch.no_grad():
        for name, p in gate.named_parameters():
            p.normal_(0, 1) if name == "alpha" else p.uniform_(-0.7, 0.7)
    return gate


def _both(gate: SearchGate, run) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """run() with the gate's kernels and op by op; and how many times the kernels' Function ran."""
    calls = []
    forward = gate_dag._MixedGate.forward

    def counting(ctx, *args):
        calls.append(1)
        return forward(ctx, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gate_dag._MixedGate, "forward", staticmethod(counting))
        gate.backend = CpuFused(ONEDNN)
        fused = run()
    gate.backend = None
    return fused, run(), len(calls)


@pytest.mark.parametrize("m, nodes, squash, match", GATES)
def test_the_whole_sequence_gate_equals_its_autograd_path(m, nodes, squash, match):
    gate = _gate(m, nodes, squash, match)
    torch.manual_seed(1)
    history = torch.randn(m, 7, 3, 5, dtype=torch.float64, requires_grad=True)  # (m, T, B, d_src)
    target = torch.randn(7, 3, 6, dtype=torch.float64)

    def run():
        out = gate(history)
        return [out, *torch.autograd.grad((out * target).sum(), [history, *gate.parameters()])]

    fused, reference, calls = _both(gate, run)
    assert calls == 1
    names = ["out", "history"] + [n for n, _ in gate.named_parameters()]
    for name, a, b in zip(names, fused, reference, strict=True):
        assert b.abs().max() > 0, name
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("m, nodes, squash, match", GATES)
def test_the_gate_step_by_step_equals_its_autograd_path(m, nodes, squash, match):
    """As a time loop calls g′: a new history at every step, the node matrices' gradients of all
    steps formed at the end (StepWeight), the mixing weights normalised once."""
    gate = _gate(m, nodes, squash, match)
    torch.manual_seed(2)
    histories = torch.randn(4, m, 3, 5, dtype=torch.float64, requires_grad=True)  # 4 steps of (m, B, d_src)
    targets = torch.randn(4, 3, 6, dtype=torch.float64)

    def run():
        step = gate.stepwise()
        outs, h = [], torch.zeros(3, 6, dtype=torch.float64)
        for history, target in zip(histories, targets):
            h = torch.tanh(step(history) + h)  # each step's output feeds the next, as h does in the cell
            outs.append(h)
        out = torch.stack(outs)
        return [out, *torch.autograd.grad((out * targets).sum(), [histories, *gate.parameters()])]

    fused, reference, calls = _both(gate, run)
    assert calls == 4
    for a, b in zip(fused, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_kernels_run_in_float32_within_its_rounding():
    gate = _gate(2, 3, "sigmoid", "project").float()
    history = torch.randn(2, 5, 3, 5, requires_grad=True)

    def run():
        out = gate(history)
        return [out, *torch.autograd.grad(out.square().sum(), [history, *gate.parameters()])]

    fused, reference, calls = _both(gate, run)
    assert calls == 1
    for a, b in zip(fused, reference, strict=True):
        assert float((a - b).detach().abs().max() / b.detach().abs().max()) < 1e-5


def test_without_gradients_or_with_the_fused_flag_off_the_gate_runs_op_by_op():
    gate = _gate(2, 3, "sigmoid", "project")
    history = torch.randn(2, 4, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        assert not gate_dag.supports(history)
        plain = gate(history)
    assert gate_dag.supports(history)
    torch.testing.assert_close(gate(history).detach(), plain, rtol=1e-12, atol=1e-14)


def test_in_eval_mode_a_second_derivative_is_autograd_s():
    """The search's Hessian eigenvalue (nas.runs.health) differentiates α twice in eval mode; the
    kernels' Function is once differentiable, so eval mode must not take it."""
    from nas.runs.health import hessian_vector_product

    gate = _gate(2, 3, "sigmoid", "project")
    history = torch.randn(2, 4, 3, 5, dtype=torch.float64)
    v = [torch.randn_like(gate.alpha)]

    def hvp():
        return hessian_vector_product(gate(history).square().sum(), [gate.alpha], v)[0]

    gate.eval()
    fused_flag_on = hvp()
    gate.backend = None
    torch.testing.assert_close(fused_flag_on, hvp(), rtol=1e-10, atol=1e-12)
