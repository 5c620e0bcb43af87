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
