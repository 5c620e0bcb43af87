"""The frozen cell's time loop as Triton kernels (nas/fast/triton_loop.py, the `cuda-loop` backend) against
the definition: on a CPU in Triton's interpreter (TRITON_INTERPRET=1), on a GPU compiled. Triton is in
the test extra; without it these tests skip."""

from __future__ import annotations

import pytest
import torch

from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype, load
from nas.fast import backends, triton_loop

pytest.importorskip("triton")

# several edges into one node and an unevenly spaced concat (as tests/test_fused_cell.py's)
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


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _layer(genotype: Genotype, dtype: torch.dtype, dropout: float, hidden: int = 20) -> FrozenRNN:
    torch.manual_seed(0)
    rnn = FrozenRNN(genotype, 5, hidden, directions=2, dropout_x=dropout, dropout_h=dropout).to(dtype)
    scale = 0.5 * min(1.0, (20 / hidden) ** 0.5)  # larger than the init range, so every path matters, and
    with torch.no_grad():  # at the papers' size not so large that relu chains overflow
        for p in rnn.parameters():
            p.uniform_(-scale, scale)
    return rnn


def _inputs(dtype: torch.dtype, batch: int = 17, hidden: int = 20, device: str = "cpu"):
    """A batch with lengths 1..4 in no order (over two blocks of sequences, `BLOCK_B` = 16, from 17)."""
    torch.manual_seed(2)
    x = torch.randn(4, batch, 5, dtype=dtype, device=device, requires_grad=True)
    h0 = torch.randn(2, batch, hidden, dtype=dtype, device=device, requires_grad=True)
    lengths = torch.arange(batch) % 4 + 1
    return x, h0, lengths[torch.randperm(batch)]


def _run(rnn: FrozenRNN, backend, x, h0, lengths) -> list[torch.Tensor]:
    """Outputs, last state and the gradients of a loss on both (inputs, initial state, every weight)."""
    rnn.backend = backend
    torch.manual_seed(1)  # the same dropout masks on both paths
    out, h = rnn(x, h0, lengths)
    target = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out)
    loss = (out * target).sum() + (h * h).sum()
    return [out, h, *torch.autograd.grad(loss, [x, h0, *rnn.parameters()])]


SMALL_TILES = dict(BLOCK_H=32, BLOCK_N=32, BLOCK_K=16, num_warps=1, num_stages=1)


@pytest.mark.parametrize(
    "name, dtype, dropout, batch, hidden, tiles",
    [
        ("darts_v2", torch.float64, 0.3, 17, 20, None),  # two blocks of sequences, the tiles as shipped
        ("multi", torch.float32, 0.0, 4, 40, SMALL_TILES),  # several tiles of every loop, as at the papers' sizes
    ],
)
def test_the_kernels_equal_the_definition_forward_and_backward(
    name, dtype, dropout, batch, hidden, tiles, interpreter, monkeypatch
):
    if tiles is not None:
        monkeypatch.setattr(triton_loop, "tiles", lambda H, forward: dict(tiles))
    rnn = _layer(MULTI if name == "multi" else load(name), dtype, dropout, hidden).train()
    x, h0, lengths = _inputs(dtype, batch, hidden)
    calls = []
    original = triton_loop.TritonSteps.forward
    triton_loop.TritonSteps.forward = lambda self, *a: calls.append(1) or original(self, *a)
    try:
        kernels = _run(rnn, backends.CudaLoop(), x, h0, lengths)
    finally:
        triton_loop.TritonSteps.forward = original
    assert calls, "the layer did not run the kernels"
    definition = _run(rnn, None, x, h0, lengths)
    names = ["out", "h", "x", "h0"] + [n for n, _ in rnn.named_parameters()]
    tolerance = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for n, k, d in zip(names, kernels, definition):
        assert d.abs().max() > 0, n
        torch.testing.assert_close(k, d, **tolerance, msg=lambda m, n=n: f"{n}: {m}")


def test_prediction_without_dropout_equals_the_definition(interpreter):
    """No gradient and no mask: the forward reads each state in place (no X)."""
    rnn = _layer(load("darts_v1"), torch.float64, 0.5, hidden=70).eval()
    x, h0, lengths = _inputs(torch.float64, batch=7, hidden=70)
    with torch.no_grad():
        rnn.backend = backends.CudaLoop()
        kernels = rnn(x, h0, lengths)
        rnn.backend = None
        definition = rnn(x, h0, lengths)
    for k, d in zip(kernels, definition):
        torch.testing.assert_close(k, d, rtol=1e-12, atol=1e-12)


def test_on_a_cpu_the_kernels_run_only_in_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not triton_loop.runs_on(torch.zeros(1))  # the layer runs its definition (or the compiled step)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert triton_loop.runs_on(torch.zeros(1)) and not triton_loop.runs_on(torch.zeros(1, dtype=torch.bfloat16))


H100_SHARED_MEMORY = 232_448  # bytes a block may use on sm_90


@pytest.mark.parametrize("kernel", ["forward", "backward"])
@pytest.mark.parametrize("H", [256, 512])  # the tagger's and bench/birnn.py's hidden sizes
def test_the_kernels_compile_for_an_h100_here(kernel, H, monkeypatch):
    """Triton's whole pipeline to an sm_90 binary (its own ptxas), no GPU needed: what the interpreter
    does not check (types, layouts, shared memory) fails here rather than on a lent GPU."""
    from triton import compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    fn = getattr(triton_loop._kernels(False), kernel)
    settings = triton_loop.tiles(H, forward=kernel == "forward")
    launch = {name: settings.pop(name) for name in ("num_warps", "num_stages")}
    constants = {"H": H, "HAS_MASK": True, "HAS_X": True, "MULTI": True, "BLOCK_B": triton_loop.BLOCK_B, **settings}
    constants = {p.name: constants[p.name] for p in fn.params if p.is_constexpr}
    kinds = {
        **dict.fromkeys(["T", "B", "R", "E", "I", "NS", "n_waves", "n_concat"], "i32"),
        **dict.fromkeys(["counts", "offsets", "waves", "groups", "edges", "concat"], "*i32"),
        "inv_concat": "fp32",
        "scale": "fp32",
    }  # the rest: float32 tensors
    signature = {p.name: "constexpr" if p.is_constexpr else kinds.get(p.name, "*fp32") for p in fn.params}
    binary = compile(
        ASTSource(fn=fn, signature=signature, constexprs=constants), target=GPUTarget("cuda", 90, 32), options=launch
    )
    assert binary.asm["cubin"] and 0 < binary.metadata.shared <= H100_SHARED_MEMORY


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_compiled_kernels_equal_the_definition_in_float64():
    """float32 kernels on the GPU against the float64 definition on the CPU, at a tagger's size."""
    genotype = load("darts_v2")
    rnn = _layer(genotype, torch.float64, 0.0, hidden=96).eval()
    x, h0, lengths = _inputs(torch.float64, batch=40, hidden=96)
    definition = _run(rnn, None, x, h0, lengths)
    gpu = rnn.to("cuda", torch.float32)
    xg, hg = (t.detach().to("cuda", torch.float32).requires_grad_() for t in (x, h0))
    kernels = _run(gpu, backends.CudaLoop(), xg, hg, lengths)
    for k, d in zip(kernels, definition):
        torch.testing.assert_close(k.double().cpu(), d, rtol=1e-4, atol=1e-4)
