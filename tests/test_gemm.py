"""nas.fast.gemm: oneDNN's products equal torch's for every layout the fused cells and the decoder hand them."""
from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

from nas.fast import gemm


def _layouts(rows: int, cols: int) -> dict[str, torch.Tensor]:
    """The same (rows, cols) matrix contiguous, as a transpose, and as a view whose rows have gaps."""
    torch.manual_seed(rows * 31 + cols)
    m = torch.randn(rows, cols)
    return {"contiguous": m, "transposed": m.t().contiguous().t(),
            "gapped": torch.cat([m, torch.randn(rows, 3)], 1)[:, :cols]}


@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "gapped"])
@pytest.mark.parametrize("w_layout", ["contiguous", "transposed", "gapped"])
@pytest.mark.parametrize("shape", [(6, 7, 40), (50, 40, 5)])  # (n, K, N): the second turns round
def test_product_equals_torch_for_every_layout(x_layout: str, w_layout: str, shape: tuple[int, int, int]):
    n, K, N = shape
    x, w = _layouts(n, K)[x_layout], _layouts(N, K)[w_layout]
    expected = x @ w.t()
    got = gemm.product(x, w)
    assert got.shape == (n, N) and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    out = torch.ones(n, N)
    gemm.product(x, w, out=out, accumulate=True)
    torch.testing.assert_close(out, expected + 1, rtol=1e-5, atol=1e-5)
    gemm.product(x, w, out=out)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    bias = torch.randn(N)
    torch.testing.assert_close(gemm.product(x, w, bias=bias), expected + bias, rtol=1e-5, atol=1e-5)


def test_weight_gradient_of_a_wide_output_is_turned_round():
    """gᵀ·x with g (rows, 10×K): the product oneDNN would copy g for is computed as (xᵀ·g)ᵀ, same values."""
    g, x = torch.randn(64, 300), torch.randn(64, 30)
    got = gemm.product(g.t(), x.t())
    assert got.shape == (300, 30) and got.is_contiguous()
    torch.testing.assert_close(got, g.t() @ x, rtol=1e-5, atol=1e-5)


def test_linear_gradients_equal_f_linear():
    torch.manual_seed(0)
    x = torch.randn(5, 4, 6, requires_grad=True)
    layer = gemm.Linear(6, 11)
    reference = torch.nn.Linear(6, 11)
    reference.load_state_dict(layer.state_dict())
    y, y_ref = layer(x), reference(x)
    torch.testing.assert_close(y, y_ref)
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, [x, layer.weight, layer.bias], grad)
    want = torch.autograd.grad(y_ref, [x, reference.weight, reference.bias], grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_linear_is_plain_f_linear_in_float64():
    """float64 is not on oneDNN's path: the op is torch's, so double-precision gradcheck stays exact."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: gemm.linear(a, b), (x, w))
    torch.testing.assert_close(gemm.linear(x, w), F.linear(x, w))


def test_packed_weights_give_the_same_products_and_their_cache_survives_copies():
    x, w = torch.randn(9, 20), torch.randn(30, 20)
    packed = gemm.pack(w)
    torch.testing.assert_close(gemm.product(x, packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gemm.product(x.t().contiguous().t(), packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert gemm.pack(w.double()).layout == torch.strided  # not on oneDNN: the weight itself

    cache, made = gemm.PackedCache(), []
    make = lambda: made.append(1) or gemm.pack(w)  # noqa: E731
    cache.get((w,), make), cache.get((w,), make)
    assert len(made) == 1
    w.mul_(2)
    torch.testing.assert_close(gemm.product(x, cache.get((w,), make)), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert len(made) == 2
    for twin in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        twin.get((w,), make)
    assert len(made) == 4


def test_the_backend_choice_is_measured_once_per_shape_and_rows_rounded_up(monkeypatch):
    measured = []
    monkeypatch.setattr(gemm, "_timings", {})
    monkeypatch.setattr(gemm, "_measure", lambda rows, K, N, packed: measured.append((rows, K, N, packed))
                        or ((2.0, 1.0) if rows > 32 else (1.0, 1.0)))  # seconds on torch.mm, on oneDNN
    monkeypatch.setattr(gemm, "_AVAILABLE", True)
    monkeypatch.setattr(gemm, "_PACKING", True)
    assert gemm.prefers_onednn(30, 8, 16) is False and gemm.prefers_onednn(32, 8, 16) is False
    assert gemm.prefers_onednn(33, 8, 16) is True
    # unpacked, K is rounded too (a weight gradient's K is the rows of all steps, new with each batch)
    assert gemm.prefers_onednn(33, 9, 16, packed=False) is True and gemm.prefers_onednn(64, 16, 16, packed=False)
    assert measured == [(32, 8, 16, True), (64, 8, 16, True), (64, 16, 16, False)]
    monkeypatch.setattr(gemm, "ONEDNN", False)  # what the benchmarks' MKL variants set
    assert gemm.prefers_onednn(33, 8, 16) is False and len(measured) == 3


@pytest.mark.skipif(not gemm.uses_onednn(torch.zeros(1)), reason="no oneDNN here")
def test_a_loop_weight_is_packed_from_the_rows_where_onednn_leads_and_only_where_that_pays(monkeypatch):
    """Over steps of 32, 32, 20, 9 and 3 rows, with oneDNN measured faster from 16 rows on (saving 1 s a
    product) and slower below: packed for products of 9 rows or more, which save 4 s in all, where
    packing costs 3 s; torch.mm throughout where it costs 5 s. Either way the products are torch's."""
    monkeypatch.setattr(gemm, "_timings", {})
    monkeypatch.setattr(gemm, "_measure", lambda rows, K, N, packed: (2.0, 1.0) if rows >= 16 else (1.0, 2.0))
    counts, w = [32, 32, 20, 9, 3], torch.randn(12, 10)
    monkeypatch.setattr(gemm, "_pack_seconds", lambda K, N: 3.0)
    packed = gemm.pack_for_steps(w, counts)
    assert packed.min_rows == 9 and packed.blocked.layout == torch._mkldnn and packed.plain is w
    monkeypatch.setattr(gemm, "_pack_seconds", lambda K, N: 5.0)
    assert gemm.pack_for_steps(w, counts) == (w, None, gemm.NEVER)
    onednn = []
    real = gemm._onednn_product
    monkeypatch.setattr(gemm, "_onednn_product", lambda *a: onednn.append(a[0].size(0)) or real(*a))
    for n in counts:
        x = torch.randn(n, 10)
        torch.testing.assert_close(gemm.product(x, packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert onednn == [32, 32, 20, 9]


@pytest.mark.skipif(not gemm.uses_onednn(torch.zeros(1)), reason="no oneDNN here")
@pytest.mark.parametrize("on_onednn", [False, True])
def test_an_unpacked_product_follows_the_measured_choice_and_equals_torch(on_onednn: bool, monkeypatch):
    calls = []
    monkeypatch.setattr(gemm, "prefers_onednn", lambda rows, K, N, packed=True: calls.append(packed) or on_onednn)
    onednn = []
    real = gemm._onednn_product
    monkeypatch.setattr(gemm, "_onednn_product", lambda *a: onednn.append(1) or real(*a))
    x, w = _layouts(6, 7)["contiguous"], _layouts(40, 7)["contiguous"]
    torch.testing.assert_close(gemm.product(x, w), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert calls == [False] and len(onednn) == int(on_onednn)


def test_measuring_the_choice_leaves_the_global_random_stream_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    gemm._measure(8, 16, 24, repeats=1)
    gemm._measure(8, 16, 24, packed=False, repeats=1)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.skipif(not gemm.uses_onednn(torch.zeros(1)), reason="no oneDNN here")
def test_a_step_weight_that_needs_no_gradient_still_passes_its_input_one(monkeypatch):
    """The first-order α step passes the weights detached: the products' inputs (which depend on α)
    still need their gradients, also where the product runs on oneDNN's packed weight."""
    import nas.cells.step_weights as step_weights
    monkeypatch.setattr(gemm, "prefers_onednn", lambda rows, K, N, packed=True: True)
    torch.manual_seed(0)
    weight, x = torch.randn(5, 7), torch.randn(4, 5, requires_grad=True)
    sw = step_weights.StepWeight(weight)
    y = sw.matmul(x)
    assert sw.packed.ways[False] is not None  # the product ran packed
    (got,) = torch.autograd.grad(y.square().sum(), x)
    (expected,) = torch.autograd.grad((x @ weight).square().sum(), x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert sw.pairs == []  # no weight gradient to form


@pytest.mark.skipif(not gemm.uses_onednn(torch.zeros(1)), reason="no oneDNN here")
@pytest.mark.parametrize("stacked", [False, True])
def test_step_weight_on_packed_weights_gives_torch_matmuls_values_and_gradients(stacked: bool, monkeypatch):
    """StepWeight's per-step products on oneDNN (forced here; a host's measurement decides in use)
    equal torch.matmul's, and so do its one-GEMM gradients, over steps whose row counts shrink."""
    import nas.cells.step_weights as step_weights
    monkeypatch.setattr(gemm, "prefers_onednn", lambda rows, K, N, packed=True: True)
    torch.manual_seed(0)
    shape = (2, 5, 7) if stacked else (5, 7)
    weight = torch.randn(*shape, requires_grad=True)
    xs = [torch.randn(*shape[:-2], rows, 5, requires_grad=True) for rows in (4, 3, 1)]

    def loss(matmul):
        h = [matmul(x) for x in xs]
        return sum((y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum() for y in h), h

    sw = step_weights.StepWeight(weight)
    total, got = loss(sw.matmul)
    assert sw.packed.ways == {False: sw.packed.ways[False]} and sw.packed.ways[False] is not None
    got_grads = torch.autograd.grad(total, [weight, *xs])
    assert sw.packed.ways[True] is not None  # the backward's g·Wᵀ ran packed too
    total, expected = loss(lambda x: torch.matmul(x, weight))
    for a, b in zip([*got, *got_grads], [*expected, *torch.autograd.grad(total, [weight, *xs])]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
