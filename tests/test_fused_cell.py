"""The fused frozen layer (nas/fast/frozen_loop.py) against the autograd path, the slow reference and
finite differences, for every shipped cell without inter-cell gates (those keep the autograd path).

The fused loop runs on the C++ kernels (when `pip install -e .` built them, or they compile on first use);
without them the backend leaves the layer to its definition, which the last tests check.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from nas.cells.cell import FrozenRNN
from nas.fast import frozen_loop, kernels as fast_kernels
from nas.fast.backends import CpuFused
from nas.fast.gemm import Gemm
from nas.fast.frozen_loop import CpuSteps, FusedFrozenCell, plan
from nas.cells.waves import plan_waves
from nas.cells.genotype import Genotype, load, shipped_cells
from reference.darts import reference_frozen

ONEDNN = Gemm("onednn")  # the fused paths' rule that takes oneDNN where this torch has it (and the shape asks)

# several inputs per node, an unevenly spaced concat, and a wave whose edges share no view
MULTI = Genotype(
    nodes=(
        (("tanh", 0),),
        (("relu", 0), ("sigmoid", 1)),
        (("identity", 2),),
        (("relu", 1), ("tanh", 3)),
        (("sigmoid", 2),),
        (("relu", 4),),
        (("tanh", 4),),
    ),
    concat=(2, 4, 5, 7),
)
CELLS = [name for name in shipped_cells() if load(name).inter is None] + ["multi"]
TOL32 = dict(rtol=1e-5, atol=1e-6)


def _genotype(name: str) -> Genotype:
    return MULTI if name == "multi" else load(name)


@pytest.fixture
def kernels():
    """The C++ kernels the fused loop runs on (without them the backend runs the definition)."""
    if fast_kernels.compiled() is None:
        pytest.skip("C++ kernels not built")
    return "c++"


def test_the_shipped_cells_without_gates_are_covered():
    assert {"darts_v1", "darts_v2", "enas", "nasabn_n1"} <= set(CELLS)


def _layer(name: str, directions: int, dtype=torch.float32, dropout: float = 0.0) -> FrozenRNN:
    torch.manual_seed(0)
    rnn = FrozenRNN(_genotype(name), 5, 4, directions=directions, dropout_x=dropout, dropout_h=dropout).to(dtype)
    rnn.backend = CpuFused(ONEDNN)
    with torch.no_grad():  # larger weights than the init range, so every path matters
        for p in rnn.parameters():
            p.uniform_(-0.5, 0.5)
    return rnn


def _run(rnn: FrozenRNN, fused: bool | None, x, hidden, lengths):
    """Outputs, last state and the gradients of a loss on both (inputs, initial state, every weight); `fused`:
    on the cpu-fused backend (True) or the definition (False), None: on the backend the layer has."""
    if fused is not None:
        rnn.backend = CpuFused(ONEDNN) if fused else None
    torch.manual_seed(1)  # the same dropout masks on both paths
    out, h = rnn(x, hidden, lengths)
    target = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    loss = (out * target).sum() + (h * h).sum()
    return [out, h, *torch.autograd.grad(loss, [x, hidden, *rnn.parameters()])]


def _inputs(directions: int, dtype=torch.float32):
    torch.manual_seed(2)
    x = torch.randn(6, 4, 5, dtype=dtype, requires_grad=True)
    hidden = torch.randn(directions, 4, 4, dtype=dtype, requires_grad=True)
    return x, hidden, torch.tensor([4, 6, 1, 3])


@pytest.mark.parametrize("name,padded", [(name, True) for name in CELLS] + [("darts_v2", False), ("multi", False)])
@pytest.mark.parametrize("directions", [1, 2])
def test_fused_layer_equals_the_autograd_path_with_dropout(name, padded, directions, kernels):
    rnn = _layer(name, directions, dropout=0.3).train()
    x, hidden, lengths = _inputs(directions)
    lengths = lengths if padded else None
    fused, autograd = _run(rnn, True, x, hidden, lengths), _run(rnn, False, x, hidden, lengths)
    names = ["out", "h", "x", "hidden"] + [n for n, _ in rnn.named_parameters()]
    for n, f, a in zip(names, fused, autograd):
        assert a.abs().max() > 0, n
        torch.testing.assert_close(f, a, **TOL32, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.parametrize("name", [n for n in CELLS if _genotype(n).attention is None])
@pytest.mark.parametrize("directions", [1, 2])
def test_fused_layer_equals_the_slow_reference(name, directions, kernels, gemm_backend):
    rnn = _layer(name, directions).eval()
    x, hidden, lengths = _inputs(directions)
    fused = _run(rnn, True, x, hidden, lengths)
    out, h = reference_frozen(rnn, x, hidden, lengths)
    target = torch.linspace(-1, 1, out.numel()).view_as(out)
    grads = torch.autograd.grad((out * target).sum() + (h * h).sum(), [x, hidden, *rnn.parameters()])
    for f, r in zip(fused, [out, h, *grads]):
        torch.testing.assert_close(f, r, **TOL32)


@pytest.mark.parametrize("fused", [True, False])
def test_a_batch_padded_past_its_longest_sequence_gives_the_trimmed_batchs_outputs(fused):
    rnn = _layer("darts_v2", 2).eval()
    rnn.backend = CpuFused(ONEDNN) if fused else None
    x, hidden, lengths = _inputs(2)
    lengths = lengths.clamp(max=4)  # the last two steps are padding for every sequence
    runs = []
    for steps in (6, 4):
        out, h = rnn(x[:steps], hidden, lengths)
        target = torch.linspace(-1, 1, 4 * out[0].numel()).view_as(out[:4])
        runs.append([out, h, *torch.autograd.grad((out[:4] * target).sum() + (h * h).sum(), [x, hidden])])
    (out, h, grad_x, grad_h), (out4, h4, grad_x4, grad_h4) = runs
    assert out[4:].abs().max() == 0 and grad_x[4:].abs().max() == 0
    for p, t in [(out[:4], out4), (h, h4), (grad_x, grad_x4), (grad_h, grad_h4)]:  # x[:4] is a view of x
        torch.testing.assert_close(p, t, **TOL32)


def _gradcheck_inputs(name: str, directions: int, counts: list[int]):
    torch.manual_seed(3)
    geno = _genotype(name)
    ninp, H, B, R = 2, 3, counts[0], sum(counts)
    x = torch.randn(directions, R, ninp, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(directions, B, H, dtype=torch.float64, requires_grad=True)
    w0 = torch.empty(directions, ninp + H, 2 * H, dtype=torch.float64).uniform_(-1, 1).requires_grad_()
    ws = torch.empty(directions, geno.steps, H, 2 * H, dtype=torch.float64).uniform_(-1, 1).requires_grad_()
    mh = torch.bernoulli(torch.full((directions, B, H), 0.7, dtype=torch.float64)) / 0.7
    return geno, (x, h0, w0, ws, mh)


@pytest.mark.parametrize("name", CELLS)
def test_fused_gradients_pass_gradcheck(name, kernels):
    counts = [3, 3, 2, 1]
    geno, (x, h0, w0, ws, mh) = _gradcheck_inputs(name, 2, counts)
    cell_plan = plan(plan_waves(geno), geno.concat, geno.steps)
    fn = lambda *a: FusedFrozenCell.apply(*a, mh, cell_plan, counts, CpuSteps(ONEDNN), None)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, h0, w0, ws), fast_mode=name not in ("darts_v2", "multi"))


def test_prediction_follows_every_change_of_the_weights():
    """The fused layer keeps its packed weights from call to call; an optimiser step, a loaded
    state, a copy and a move to float64 must each be seen by the next prediction."""
    rnn, saved = _layer("multi", 2).eval(), FrozenRNN(MULTI, 5, 4, directions=2)
    x, hidden, lengths = _inputs(2)

    def agree(layer):
        with torch.inference_mode():
            layer.backend = CpuFused(ONEDNN)
            fused = layer(x, hidden, lengths)[0]
            layer.backend = None
            torch.testing.assert_close(fused, layer(x, hidden, lengths)[0], **TOL32)
            layer.backend = CpuFused(ONEDNN)
            return fused

    before = agree(rnn)
    with torch.no_grad():
        rnn.ws.mul_(-1.5)  # in place, as an optimiser step changes it
    changed = agree(rnn)
    assert not torch.allclose(changed, before)
    rnn.load_state_dict(saved.state_dict())
    assert not torch.allclose(agree(rnn), changed)
    twin = copy.deepcopy(rnn)  # packed weights cannot be copied: the copy packs its own
    torch.testing.assert_close(agree(twin), agree(rnn))
    rnn.double()
    x, hidden = x.double(), hidden.double()
    assert agree(rnn).dtype == torch.float64


class _OpByOp(CpuFused):
    """cpu-fused with its fused loop off: the autograd path it falls back to (its weights `StepWeight`s, whose
    summed bf16 gradients round otherwise than the definition's per-step ones)."""

    def frozen_loop(self, *args):
        return None


def test_under_autocast_the_layer_runs_the_autograd_path_in_bf16():
    rnn = _layer("darts_v2", 2).train()
    x, hidden, lengths = _inputs(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = _run(rnn, True, x, hidden, lengths)
        rnn.backend = _OpByOp()
        autograd = _run(rnn, None, x, hidden, lengths)
    for f, a in zip(fused, autograd):
        assert torch.equal(f, a)
    full = _run(rnn, True, x, hidden, lengths)
    assert not torch.allclose(fused[0], full[0], rtol=1e-4, atol=1e-4)  # bf16 matmuls did run
    for f, a in zip(fused, full):
        torch.testing.assert_close(f.float(), a, rtol=0.05, atol=0.05)


def test_kernels_that_do_not_load_are_named_with_the_reason(monkeypatch, caplog):
    monkeypatch.setattr(fast_kernels, "_kernels", None)
    monkeypatch.setattr(fast_kernels, "_compile_pending", False)  # nor compiled on first use
    monkeypatch.setattr(fast_kernels, "_kernels_error", ImportError("undefined symbol: _ZN2at4_ops"))
    monkeypatch.setattr(fast_kernels, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        fast_kernels.warn_once_without_kernels()
    (record,) = caplog.records
    assert "do not load (undefined symbol: _ZN2at4_ops; built against another torch?)" in record.getMessage()
    assert "were not built" not in record.getMessage()


def test_without_kernels_one_warning_line_then_the_definition(monkeypatch, caplog):
    monkeypatch.setattr(fast_kernels, "_kernels", None)
    monkeypatch.setattr(fast_kernels, "_compile_pending", False)  # nor compiled on first use
    monkeypatch.setattr(fast_kernels, "_warned", False)
    monkeypatch.setattr(frozen_loop, "fused_frozen_cell", None)  # calling it would fail
    rnn = _layer("darts_v2", 1).train()
    x, hidden, lengths = _inputs(1)
    with caplog.at_level(logging.WARNING, logger="nas.fast.kernels"):
        first = _run(rnn, None, x, hidden, lengths)
        rnn(x, hidden, lengths)
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()
    message = caplog.records[0].getMessage()  # true for a wheel's user too: no editable install asked for
    assert "were not built" in message and "pip install --no-build-isolation nas-tagger" in message
    assert "the cells run their definition through autograd" in message
    assert " -e " not in message and "docs/" not in message and "README" not in message  # nothing to look up
    for got, definition in zip(first, _run(rnn, False, x, hidden, lengths)):
        torch.testing.assert_close(got, definition, **TOL32)  # its per-step weights: `StepWeight`s


def test_a_cell_with_an_op_the_fused_loop_does_not_know_runs_the_autograd_path(monkeypatch):
    monkeypatch.setattr(frozen_loop, "OP_CODES", {"identity": 0, "tanh": 1, "sigmoid": 3})  # no relu: darts_v2 has it
    monkeypatch.setattr(frozen_loop, "fused_frozen_cell", None)  # calling it would fail
    rnn = _layer("darts_v2", 2)
    x, hidden, lengths = _inputs(2)
    got = rnn(x, hidden, lengths)[0]
    rnn.backend = None
    assert torch.equal(got, rnn(x, hidden, lengths)[0])


def test_at_two_threads_the_directions_run_concurrently_and_agree(kernels):
    """With more than one thread the C++ loop runs each direction on its own thread: the same
    outputs and gradients as the autograd path, in training and under inference_mode."""
    rnn = _layer("multi", 2, dropout=0.3).train()
    x, hidden, lengths = _inputs(2)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fused = _run(rnn, True, x, hidden, lengths)
        rnn.eval()
        with torch.inference_mode():
            predicted = rnn(x, hidden, lengths)[0]
    finally:
        torch.set_num_threads(threads)
    rnn.train()
    for f, a in zip(fused, _run(rnn, False, x, hidden, lengths)):
        torch.testing.assert_close(f, a, **TOL32)
    rnn.eval()
    rnn.backend = None
    with torch.inference_mode():
        torch.testing.assert_close(predicted, rnn(x, hidden, lengths)[0], **TOL32)
