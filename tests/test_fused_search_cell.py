"""The fused search cell (nas/fast/search_loop.py) against the autograd path, the slow reference
(reference/darts.py) and finite differences; and when it applies.

(tests/test_reference_cells.py runs the search cell on both paths against the reference in float64,
the α step of the Architect included.)
"""

from __future__ import annotations

import logging

import pytest
import torch

from nas.fast import kernels
from nas.fast.backends import CpuFused, attach, detach, search_fusable
from nas.fast.gemm import Gemm
from nas.common.distributed import SyncedBatchNorm
from nas.fast.search_loop import FusedGatedSearchCell, FusedSearchCell, loop_weights
from nas.cells.gates import InterGates
from nas.methods import method_class
from nas.methods.darts import Darts
from nas.cells.search_cell import SearchRNN, node_norms
from reference.darts import ReferenceSearchRNN, load_weights

ONEDNN = Gemm("onednn")  # the fused paths' rule that takes oneDNN where this torch has it (and the shape asks)

REL32 = 1e-5  # float32: largest difference within 1e-5 of the tensor's largest entry
pytestmark = pytest.mark.skipif(kernels.compiled() is None, reason="C++ kernels not built")


def _fusable(cell: SearchRNN, x: torch.Tensor) -> bool:
    """Whether the cell's forward on x runs the fused Function: on the cpu-fused backend, where it applies."""
    return isinstance(cell.backend, CpuFused) and search_fusable(cell, x)


def _pair(method: str, dropout: float, dtype=torch.float32, steps: int = 8):
    torch.manual_seed(0)
    fast = attach(
        SearchRNN(7, 6, steps, method_class(method).rule, dropout_x=dropout, dropout_h=dropout), CpuFused(ONEDNN)
    )
    with torch.no_grad():
        fast.alpha.normal_(0, 1)  # far from uniform, so a misplaced weight shows
        for w in fast.ws:
            w.uniform_(-0.5, 0.5)  # larger than the init range, so every path matters
    fast.to(dtype)
    ref = ReferenceSearchRNN(7, 6, steps, method, dropout_x=dropout, dropout_h=dropout).to(dtype)
    load_weights(ref, fast)
    return fast, ref


def _run(cell, x, hidden):
    """Outputs, last state and the gradients of a loss on both (inputs, initial state, every weight and α)."""
    torch.manual_seed(1)  # the same dropout masks on every path
    out, h = cell(x, hidden)
    target = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    loss = (out * target).sum() + (h * h).sum()
    grads = torch.autograd.grad(loss, [x, hidden, *cell.parameters()])
    return [out, h, *grads]


def _statistics(cell) -> list[torch.Tensor]:
    """The running mean and variance of s0 and each node."""
    return [torch.stack([getattr(bn, name) for bn in cell.bn]) for name in ("running_mean", "running_var")]


def _assert_close(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    """Largest difference within REL32 of b's largest entry (an elementwise relative tolerance
    would fail on entries near zero, where float32 rounding of sums dominates on every path)."""
    assert b.abs().max() > 0, name
    error = float((a - b).abs().max() / b.abs().max())
    assert error <= REL32, f"{name}: relative difference {error:.2e}"


def _inputs(dtype=torch.float32):
    torch.manual_seed(2)
    return (torch.randn(5, 4, 7).to(dtype).requires_grad_(), torch.randn(1, 4, 6).to(dtype).requires_grad_())


@pytest.mark.parametrize("method", ["darts", "idarts"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fused_search_cell_equals_the_reference_in_float32(method, dropout, gemm_backend):
    fast, ref = _pair(method, dropout)
    assert _fusable(fast, torch.zeros(1, 4, 7))
    x, hidden = _inputs()
    names = ["out", "h", "x", "hidden"] + [n for n, _ in fast.named_parameters()]
    assert "alpha" in names and "ws.7" in names
    for name, a, b in zip(names, _run(fast, x, hidden), _run(ref, x, hidden)):
        _assert_close(a, b, name)
    assert [int(bn.num_batches_tracked) for bn in fast.bn] == [5] * 9  # each state's BatchNorm, once a step
    assert int(ref.bn.num_batches_tracked) == 5 * 9  # DARTS's one BatchNorm, 9 times a step


def test_fused_search_cell_equals_the_autograd_path():
    fast, _ = _pair("darts", 0.3, torch.float64)
    x, hidden = _inputs(torch.float64)
    fused = _run(fast, x, hidden) + _statistics(fast)
    detach(fast)
    for bn in fast.bn:
        bn.reset_running_stats()
    for a, b in zip(fused, _run(fast, x, hidden) + _statistics(fast)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("steps, history", [(6, 2), (2, 3)])  # the second reads the carried history at every step
@pytest.mark.parametrize(
    "size_match, function, per_step", [("project", FusedGatedSearchCell, False), ("pad", FusedSearchCell, True)]
)
def test_with_ess_gates_the_fused_cell_equals_the_autograd_path(
    steps, history, size_match, function, per_step, dropout
):
    """The gates read h_{t-1..t-m}: with g′'s history projected the whole loop runs in C++ (one call),
    otherwise the fused cell one step per call. Either way: the same outputs, history, gradients (gate
    weights and both α included) and BatchNorm statistics as the autograd path."""
    torch.manual_seed(0)
    rule = Darts.rule
    gates = InterGates.search(5, 4, rule, history, 3, size_match=size_match)
    cell = attach(
        SearchRNN(5, 4, 3, rule, dropout_x=dropout, dropout_h=dropout, inter=gates).double(), CpuFused(ONEDNN)
    )
    with torch.no_grad():
        for name, p in cell.named_parameters():
            p.normal_(0, 1) if "alpha" in name else p.uniform_(-0.5, 0.5)
    torch.manual_seed(2)
    x = torch.randn(steps, 4, 5, dtype=torch.float64, requires_grad=True)
    hidden = tuple(
        torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        for shape in ((1, 4, 4), (history, 4, 5), (history, 4, 4))
    )

    def run():
        torch.manual_seed(1)
        out, (h, x_hist, h_hist) = cell(x, hidden)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum() + (h * h).sum()
        loss = loss + (h_hist * torch.linspace(-2, 1, h_hist.numel(), dtype=out.dtype).view_as(h_hist)).sum()
        grads = torch.autograd.grad(loss, [x, *hidden, *cell.parameters()])
        return [out, h, x_hist, h_hist, *grads] + _statistics(cell)

    names = (
        ["out", "h", "x_hist", "h_hist", "x", "h0", "x_hist0", "h_hist0"]
        + [n for n, _ in cell.named_parameters()]
        + ["mean", "var"]
    )
    assert _fusable(cell, x) and "inter.g.alpha" in names
    seen = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(function, "forward", _spy(function.forward, seen))
        fused = run()
    assert len(seen) == (steps if per_step else 1)
    detach(cell)
    for bn in cell.bn:
        bn.reset_running_stats()
    for name, a, b in zip(names, fused, run()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


def _spy(function, seen: list):
    def spy(ctx, *args):
        seen.append(args[0].size(0))
        return function(ctx, *args)

    return staticmethod(spy)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_search_cell_gives_what_the_cpu_gives():
    """On a GPU the cell runs its autograd path (cuDNN's BatchNorm among its ops), on a CPU the fused
    Function: in float64, from the same weights and inputs (no dropout: the devices draw different
    masks), the same outputs, gradients and BatchNorm statistics."""
    cell, _ = _pair("darts", 0.0, torch.float64)
    x, hidden = _inputs(torch.float64)
    assert _fusable(cell, x)
    on_cpu = _run(cell, x, hidden) + _statistics(cell)
    for bn in cell.bn:
        bn.reset_running_stats()
    cell.cuda()
    x, hidden = (t.detach().cuda().requires_grad_() for t in (x, hidden))
    assert not _fusable(cell, x)
    for a, b in zip(on_cpu, _run(cell, x, hidden) + _statistics(cell)):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("masked", [False, True])
def test_fused_search_cell_passes_gradcheck(masked):
    torch.manual_seed(0)
    T, B, H, N = 3, 4, 3, 3
    xproj = torch.randn(T, B, 2 * H, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(B, H, dtype=torch.float64, requires_grad=True)
    w0h = torch.empty(H, 2 * H, dtype=torch.float64).uniform_(-0.8, 0.8).requires_grad_()
    ws = torch.empty(N, H, 2 * H, dtype=torch.float64).uniform_(-0.8, 0.8).requires_grad_()
    mix = torch.rand(N * (N + 1) // 2, 4, dtype=torch.float64, requires_grad=True)
    mh = torch.bernoulli(torch.full((B, H), 0.7, dtype=torch.float64)) / 0.7 if masked else None
    bn = node_norms(H, N).double()

    def fn(xproj, h0, w0h, ws, mix):
        return FusedSearchCell.apply(xproj, h0, w0h, ws, mix, mh, bn, loop_weights(ONEDNN, w0h, ws, B))

    assert torch.autograd.gradcheck(fn, (xproj, h0, w0h, ws, mix))


def test_first_order_alpha_pass_forms_no_weight_gradient():
    """The Architect passes the weights detached: the Function then skips every weight GEMM."""
    fast, _ = _pair("darts", 0.3)
    x, hidden = _inputs()
    seen = []
    original = FusedSearchCell.backward

    def spy(ctx, grad):
        seen.append(ctx.needs_input_grad[1:5])
        return original(ctx, grad)

    params = {n: p.detach() for n, p in fast.named_parameters() if n != "alpha"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FusedSearchCell, "backward", staticmethod(spy))
        out, _ = torch.func.functional_call(fast, {**params, "alpha": fast.alpha}, (x.detach(), hidden.detach()))
        (grad,) = torch.autograd.grad(out.sum(), [fast.alpha])
    assert seen == [(False, False, False, True)] and grad.abs().max() > 0


def test_the_fused_path_applies_only_where_it_is_exact():
    x = torch.zeros(3, 4, 7)
    cell = attach(SearchRNN(7, 6, 2, Darts.rule), CpuFused(ONEDNN))
    assert _fusable(cell, x)
    assert not _fusable(cell, x[:, :1])  # BatchNorm of one row: the autograd path raises torch's error
    with torch.no_grad():
        assert not _fusable(cell, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _fusable(cell, x)
    assert not _fusable(SearchRNN(7, 6, 2, Darts.rule), x)  # no backend: the definition
    assert not _fusable(cell.eval(), x)
    synced = attach(SearchRNN(7, 6, 2, Darts.rule), CpuFused(ONEDNN))
    synced.bn[1].__class__ = SyncedBatchNorm  # what nas.common.distributed does under torchrun
    assert not _fusable(synced, x)
    gated = attach(SearchRNN(7, 6, 2, Darts.rule, inter=InterGates.search(7, 6, Darts.rule, 2, 2)), CpuFused(ONEDNN))
    assert _fusable(gated, x)  # one step per call


def test_without_kernels_one_warning_line_then_the_autograd_path(monkeypatch, caplog):
    fast, ref = _pair("darts", 0.3)
    x, hidden = _inputs()
    expected = _run(ref, x, hidden)
    monkeypatch.setattr(kernels, "_kernels", None)
    monkeypatch.setattr(kernels, "_compile_pending", False)  # nor compiled on first use
    monkeypatch.setattr(kernels, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        got = _run(fast, x, hidden)
        _run(fast, x, hidden)
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()
    assert "the cells run their definition through autograd" in caplog.records[0].getMessage()
    for k, (a, b) in enumerate(zip(got, expected)):
        _assert_close(a, b, str(k))


def test_an_op_set_the_fused_loop_does_not_know_runs_the_autograd_path(monkeypatch):
    from nas.fast import search_loop

    x = torch.zeros(3, 4, 7)
    assert _fusable(attach(SearchRNN(7, 6, 2, Darts.rule), CpuFused(ONEDNN)), x)
    monkeypatch.setattr(search_loop, "OPS_SUPPORTED", ("none", "identity", "tanh", "relu"))
    assert not _fusable(attach(SearchRNN(7, 6, 2, Darts.rule), CpuFused(ONEDNN)), x)
