"""nas.fast.gemm: oneDNN's products equal torch's for every layout the fused cells and the decoder hand them, and
which one a product gets is a rule of the run's setting and the shape."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F

from nas.common.errors import InputError
from nas.fast import gemm

# whether this torch has oneDNN, never which rule the host gets: tests force the rule
ONEDNN_BUILD = pytest.mark.skipif(not gemm._AVAILABLE, reason="a torch without oneDNN")


def _layouts(rows: int, cols: int) -> dict[str, torch.Tensor]:
    """The same (rows, cols) matrix contiguous, as a transpose, and as a view whose rows have gaps."""
    torch.manual_seed(rows * 31 + cols)
    m = torch.randn(rows, cols)
    return {
        "contiguous": m,
        "transposed": m.t().contiguous().t(),
        "gapped": torch.cat([m, torch.randn(rows, 3)], 1)[:, :cols],
    }


@pytest.fixture
def every_shape_on_the_rule(gemm_rule, monkeypatch):
    """Each GEMM rule (`gemm_rule`, a `Gemm`), oneDNN's taking even these small shapes (no `MIN_ONEDNN`)."""
    monkeypatch.setattr(gemm, "MIN_ONEDNN", 0)
    return gemm_rule


@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "gapped"])
@pytest.mark.parametrize("w_layout", ["contiguous", "transposed", "gapped"])
@pytest.mark.parametrize("shape", [(6, 7, 40), (50, 40, 5)])  # (n, K, N): the second turns round
def test_product_equals_torch_for_every_layout(
    x_layout: str, w_layout: str, shape: tuple[int, int, int], every_shape_on_the_rule
):
    n, K, N = shape
    x, w = _layouts(n, K)[x_layout], _layouts(N, K)[w_layout]
    expected, rule = x @ w.t(), every_shape_on_the_rule
    got = rule.product(x, w)
    assert got.shape == (n, N) and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    out = torch.ones(n, N)
    rule.product(x, w, out=out, accumulate=True)
    torch.testing.assert_close(out, expected + 1, rtol=1e-5, atol=1e-5)
    rule.product(x, w, out=out)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    bias = torch.randn(N)
    torch.testing.assert_close(rule.product(x, w, bias=bias), expected + bias, rtol=1e-5, atol=1e-5)


def test_weight_gradient_of_a_wide_output_is_turned_round(every_shape_on_the_rule):
    """gᵀ·x with g (rows, 10×K): the product oneDNN would copy g for is computed as (xᵀ·g)ᵀ, same values."""
    g, x = torch.randn(64, 300), torch.randn(64, 30)
    got = every_shape_on_the_rule.product(g.t(), x.t())
    assert got.shape == (300, 30) and got.is_contiguous()
    torch.testing.assert_close(got, g.t() @ x, rtol=1e-5, atol=1e-5)


def test_linear_gradients_equal_f_linear(every_shape_on_the_rule):
    torch.manual_seed(0)
    x = torch.randn(5, 4, 6, requires_grad=True)
    reference = torch.nn.Linear(6, 11)
    weight, bias = (p.detach().clone().requires_grad_() for p in reference.parameters())
    y, y_ref = every_shape_on_the_rule.linear(x, weight, bias), reference(x)
    torch.testing.assert_close(y, y_ref)
    grad = torch.randn_like(y)
    got = torch.autograd.grad(y, [x, weight, bias], grad)
    want = torch.autograd.grad(y_ref, [x, reference.weight, reference.bias], grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_linear_is_plain_f_linear_in_float64():
    """float64 is not on oneDNN's path: the op is torch's, so double-precision gradcheck stays exact."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    rule = gemm.Gemm("onednn")
    assert torch.autograd.gradcheck(lambda a, b: rule.linear(a, b), (x, w))
    torch.testing.assert_close(rule.linear(x, w), F.linear(x, w))


def test_packed_weights_give_the_same_products_and_their_cache_survives_copies(every_shape_on_the_rule):
    x, w, rule = torch.randn(9, 20), torch.randn(30, 20), every_shape_on_the_rule
    packed = rule.pack(w)
    torch.testing.assert_close(rule.product(x, packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rule.product(x.t().contiguous().t(), packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert rule.pack(w.double()).layout == torch.strided  # not on oneDNN: the weight itself

    cache, made = gemm.PackedCache(), []
    make = lambda: made.append(1) or rule.pack(w)  # noqa: E731
    cache.get((w,), make), cache.get((w,), make)
    assert len(made) == 1
    w.mul_(2)
    torch.testing.assert_close(rule.product(x, cache.get((w,), make)), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert len(made) == 2
    for twin in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        twin.get((w,), make)
    assert len(made) == 4


AMD = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 avx512f avx512bw\n"


def test_the_backend_is_a_rule_of_the_setting_and_the_shape_never_a_timing(monkeypatch):
    monkeypatch.setattr(gemm, "_AVAILABLE", True)
    monkeypatch.setattr(gemm, "_PACKING", True)
    onednn, mkl = gemm.Gemm("onednn"), gemm.Gemm("mkl")
    assert onednn.prefers_onednn(64, 128, 128) and onednn.prefers_onednn(64, 128, 128, packed=False)
    assert not onednn.prefers_onednn(63, 128, 128)  # below MIN_ONEDNN multiply-adds: torch.mm
    assert not mkl.prefers_onednn(4096, 4096, 4096) and not mkl.uses_onednn(torch.zeros(1))
    assert onednn.uses_onednn(torch.zeros(1)) and not onednn.uses_onednn(torch.zeros(1, dtype=torch.float64))
    monkeypatch.setattr(gemm, "host_backend", lambda cpuinfo=None: "onednn")
    assert gemm.resolve("auto") == "onednn" and gemm.resolve("mkl") == "mkl"
    for bad in (lambda: gemm.resolve("fastest"), lambda: gemm.Gemm("fastest")):
        with pytest.raises(ValueError):
            bad()


@ONEDNN_BUILD
def test_two_rules_in_one_process_each_keep_their_own_products(monkeypatch):
    """No process-wide rule: each backend's products follow its own (two runs in one process, or a test)."""
    onednn = []
    real = gemm._onednn_product
    monkeypatch.setattr(gemm, "_onednn_product", lambda *a: onednn.append(1) or real(*a))
    x, w = torch.randn(256, 128), torch.randn(128, 128)  # 2^22 multiply-adds: oneDNN's under its rule
    for rule, expected in (("onednn", 1), ("mkl", 1), ("onednn", 2)):
        torch.testing.assert_close(gemm.Gemm(rule).product(x, w), x @ w.t(), rtol=1e-5, atol=1e-5)
        assert len(onednn) == expected


def test_auto_is_onednn_on_amd_cpus_with_avx512_and_torch_mm_elsewhere():
    assert gemm.host_backend(AMD) == "onednn"
    assert gemm.host_backend(AMD.replace(" avx512f", "")) == "mkl"  # AMD with AVX2 only
    assert gemm.host_backend(AMD.replace("AuthenticAMD", "GenuineIntel")) == "mkl"
    assert gemm.host_backend("") == "mkl"
    assert gemm.host_backend() in ("onednn", "mkl")


def test_nas_gemm_sets_autos_rule_on_any_host_and_a_bad_value_is_one_line(monkeypatch):
    for rule in ("onednn", "mkl"):
        monkeypatch.setenv("NAS_GEMM", rule)
        assert gemm.host_backend() == gemm.resolve("auto") == rule
        assert gemm.host_backend(AMD) == "onednn"  # a CPU's own rule, given its cpuinfo
    monkeypatch.setenv("NAS_GEMM", "fastest")
    with pytest.raises(InputError, match=r"^\$NAS_GEMM='fastest': expected onednn or mkl"):
        gemm.resolve("auto")


@pytest.mark.skipif(not gemm._AVAILABLE, reason="no oneDNN here")
def test_a_loop_weight_is_packed_from_the_rows_the_rule_puts_on_onednn_and_only_where_that_pays(monkeypatch):
    """A 64 × 128 weight (2^13 multiply-adds a row): products of 128 rows or more run on oneDNN. Over
    steps of 1024, 1024, 512, 100 and 3 rows it is packed from 512 rows on (2,560 rows in all, over
    PACK_ROWS); over steps of 1024, 512 and 100 not (1,536 rows). Either way the products are torch's."""
    rule = gemm.Gemm("onednn")
    w = torch.randn(128, 64)
    counts = [1024, 1024, 512, 100, 3]
    packed = rule.pack_for_steps(w, counts)
    assert packed.min_rows == 512 and packed.blocked.layout == torch._mkldnn and packed.plain is w
    assert rule.pack_for_steps(w, [1024, 512, 100]) == (w, None, gemm.NEVER)
    onednn = []
    real = gemm._onednn_product
    monkeypatch.setattr(gemm, "_onednn_product", lambda *a: onednn.append(a[0].size(0)) or real(*a))
    for n in counts:
        x = torch.randn(n, 64)
        torch.testing.assert_close(rule.product(x, packed), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert onednn == [1024, 1024, 512]  # 100 rows: plain weight, below MIN_ONEDNN, torch.mm
    assert gemm.Gemm("mkl").pack_for_steps(w, counts) == (w, None, gemm.NEVER)


@ONEDNN_BUILD
@pytest.mark.parametrize("on_onednn", [False, True])
def test_an_unpacked_product_follows_the_rule_and_equals_torch(on_onednn: bool, monkeypatch):
    calls = []
    monkeypatch.setattr(
        gemm.Gemm, "prefers_onednn", lambda self, rows, K, N, packed=True: calls.append(packed) or on_onednn
    )
    onednn = []
    real = gemm._onednn_product
    monkeypatch.setattr(gemm, "_onednn_product", lambda *a: onednn.append(1) or real(*a))
    x, w = _layouts(6, 7)["contiguous"], _layouts(40, 7)["contiguous"]
    torch.testing.assert_close(gemm.Gemm("onednn").product(x, w), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert calls == [False] and len(onednn) == int(on_onednn)


@ONEDNN_BUILD
def test_a_step_weight_that_needs_no_gradient_still_passes_its_input_one(monkeypatch):
    """The first-order α step passes the weights detached: the products' inputs (which depend on α)
    still need their gradients, also where the product runs on oneDNN's packed weight."""
    import nas.fast.step_weights as step_weights

    monkeypatch.setattr(gemm.Gemm, "prefers_onednn", lambda self, rows, K, N, packed=True: True)
    torch.manual_seed(0)
    weight, x = torch.randn(5, 7), torch.randn(4, 5, requires_grad=True)
    sw = step_weights.StepWeight(weight, gemm.Gemm("onednn"))
    y = sw.matmul(x)
    assert sw.packed.ways[False] is not None  # the product ran packed
    (got,) = torch.autograd.grad(y.square().sum(), x)
    (expected,) = torch.autograd.grad((x @ weight).square().sum(), x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert sw.pairs == []  # no weight gradient to form


@ONEDNN_BUILD
@pytest.mark.parametrize("stacked", [False, True])
def test_step_weight_on_packed_weights_gives_torch_matmuls_values_and_gradients(stacked: bool, monkeypatch):
    """StepWeight's per-step products on oneDNN (forced here; the GEMM rule decides in use)
    equal torch.matmul's, and so do its one-GEMM gradients, over steps whose row counts shrink."""
    import nas.fast.step_weights as step_weights

    monkeypatch.setattr(gemm.Gemm, "prefers_onednn", lambda self, rows, K, N, packed=True: True)
    torch.manual_seed(0)
    shape = (2, 5, 7) if stacked else (5, 7)
    weight = torch.randn(*shape, requires_grad=True)
    xs = [torch.randn(*shape[:-2], rows, 5, requires_grad=True) for rows in (4, 3, 1)]

    def loss(matmul):
        h = [matmul(x) for x in xs]
        return sum((y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum() for y in h), h

    sw = step_weights.StepWeight(weight, gemm.Gemm("onednn"))
    total, got = loss(sw.matmul)
    assert sw.packed.ways == {False: sw.packed.ways[False]} and sw.packed.ways[False] is not None
    got_grads = torch.autograd.grad(total, [weight, *xs])
    assert sw.packed.ways[True] is not None  # the backward's g·Wᵀ ran packed too
    total, expected = loss(lambda x: torch.matmul(x, weight))
    for a, b in zip([*got, *got_grads], [*expected, *torch.autograd.grad(total, [weight, *xs])]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
