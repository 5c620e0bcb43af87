"""The fast cells against their slow references (reference/darts.py): values and gradients.

Compared in float64 so that a 1e-5 relative tolerance catches any real difference, not rounding.
"""

from __future__ import annotations

import pytest
import torch

from nas.methods.architect import Architect
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype, load
from nas.methods import method_class
from nas.lm.model import RNNModel, language_model_loss
from nas.cells.search_cell import SearchRNN
from nas.fast.backends import CpuFused
from nas.fast.gemm import Gemm
from reference.darts import (
    ReferenceArchitect,
    ReferenceSearchRNN,
    load_weights,
    reference_frozen,
    reference_mixing_weights,
)

ONEDNN = Gemm("onednn")  # the fused paths' rule that takes oneDNN where this torch has it (and the shape asks)

TOL = dict(rtol=1e-5, atol=1e-9)


def _grads(module: torch.nn.Module, loss: torch.Tensor, *extra: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, [*module.parameters(), *extra]))


def _search_pair(method: str, steps: int, dropout: float, fused: bool = True):
    torch.manual_seed(0)
    fast = SearchRNN(7, 6, steps, method_class(method).rule, dropout_x=dropout, dropout_h=dropout).double()
    fast.backend = CpuFused(ONEDNN) if fused else None
    with torch.no_grad():
        fast.alpha.normal_(0, 1)  # far from uniform, so a misplaced weight shows
    ref = ReferenceSearchRNN(7, 6, steps, method, dropout_x=dropout, dropout_h=dropout).double()
    load_weights(ref, fast)
    return fast, ref


@pytest.mark.parametrize("method", ["darts", "idarts"])
def test_mixing_weights_match_the_reference_softmax(method):
    alpha = torch.randn(36, 5, dtype=torch.float64)
    fast = SearchRNN(4, 4, 8, method_class(method).rule).double()
    with torch.no_grad():
        fast.alpha.copy_(alpha)
    torch.testing.assert_close(fast.mixing_weights(), reference_mixing_weights(alpha, 8, method), **TOL)


@pytest.mark.parametrize("method", ["darts", "idarts"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])
def test_search_cell_matches_reference_values_and_gradients(method, dropout, fused):
    fast, ref = _search_pair(method, steps=4, dropout=dropout, fused=fused)
    x = torch.randn(5, 3, 7, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(1, 3, 6, dtype=torch.float64, requires_grad=True)
    target = torch.randn(5, 3, 6, dtype=torch.float64)
    results = []
    for cell in (fast, ref):
        torch.manual_seed(1)  # the same dropout masks for both
        out, h = cell(x, hidden)
        loss = (out * target).sum() + h.pow(2).sum()
        results.append((out, h, _grads(cell, loss, x, hidden)))
    (out_f, h_f, g_f), (out_r, h_r, g_r) = results
    torch.testing.assert_close(out_f, out_r, **TOL)
    torch.testing.assert_close(h_f, h_r, **TOL)
    names = [n for n, _ in fast.named_parameters()] + ["x", "hidden"]
    assert "alpha" in names
    for name, gf, gr in zip(names, g_f, g_r):
        assert gr.abs().max() > 0, name
        torch.testing.assert_close(gf, gr, **TOL, msg=lambda m, name=name: f"gradient of {name}: {m}")


def test_search_cell_eval_mode_matches_reference_at_eight_nodes():
    fast, ref = _search_pair("darts", steps=8, dropout=0.5)
    fast.eval(), ref.eval()
    x = torch.randn(3, 2, 7, dtype=torch.float64)
    torch.testing.assert_close(fast(x)[0], ref(x)[0], **TOL)


def _search_model(cell_class, mixing, fused: bool = True) -> RNNModel:
    """`mixing`: the method's rule for SearchRNN, its name for the reference."""
    torch.manual_seed(0)
    model = RNNModel(11, 6, cell_class(6, 6, 3, mixing, dropout_x=0.3, dropout_h=0.2), 0.3, 0.2, 0.1).double()
    model.rnn.backend = CpuFused(ONEDNN) if fused else None
    with torch.no_grad():
        model.rnn.alpha.normal_(0, 1)
    return model


@pytest.mark.parametrize("method", ["darts", "idarts"])
@pytest.mark.parametrize("order,weight_clip", [(1, None), (2, None), (2, 0.01)])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])
def test_alpha_step_matches_reference_architect(method, order, weight_clip, fused):
    """Same α update as the reference code's structure (full backward, copied model, in-place HVP),
    also when the weight gradient and v are clipped (0.01 is below both norms here)."""
    fast, ref = _search_model(SearchRNN, method_class(method).rule, fused), _search_model(ReferenceSearchRNN, method)
    load_weights(ref, fast)  # the same weights, by name
    torch.manual_seed(2)
    words = torch.randint(11, (5, 3, 2))
    train, valid = (words[..., 0][:-1], words[..., 0][1:]), (words[..., 1][:-1], words[..., 1][1:])
    before = {n: p.detach().clone() for n, p in fast.named_parameters()}
    hiddens = []
    ours = {"loss_fn": language_model_loss, "average": lambda tensors: tensors}  # the LM's loss, one process
    for model, architect_class, handed in ((fast, Architect, ours), (ref, ReferenceArchitect, {})):
        architect = architect_class(model, lr=0.1, order=order, weight_wd=1e-3, weight_clip=weight_clip, **handed)
        torch.manual_seed(3)
        hiddens.append(architect.step(train, model.init_hidden(3), valid, model.init_hidden(3), eta=0.5))
    torch.testing.assert_close(hiddens[0], hiddens[1], **TOL)
    assert not torch.equal(fast.rnn.alpha, before["rnn.alpha"])
    torch.testing.assert_close(fast.rnn.alpha, ref.rnn.alpha, **TOL)
    for name, p in fast.named_parameters():  # the fast α step never writes the weights
        if name != "rnn.alpha":
            assert torch.equal(p, before[name]), name
    assert all((bn.running_mean == 0).all() for bn in fast.rnn.bn)  # nor the BatchNorm statistics


MULTI = Genotype(
    nodes=((("tanh", 0),), (("relu", 0), ("sigmoid", 1)), (("identity", 2),), (("relu", 1), ("tanh", 3))),
    concat=(2, 3, 4),
)


@pytest.mark.parametrize("geno", [load("DARTS_V2"), MULTI], ids=["darts_v2", "multi_input"])
@pytest.mark.parametrize("directions", [1, 2])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])
def test_frozen_cell_matches_reference_on_variable_lengths(geno, directions, fused):
    torch.manual_seed(0)
    rnn = FrozenRNN(geno, 5, 4, directions=directions).double()
    rnn.backend = CpuFused(ONEDNN) if fused else None
    with torch.no_grad():  # larger weights than the init range, so every path matters
        for p in rnn.parameters():
            p.uniform_(-0.5, 0.5)
    lengths = torch.tensor([6, 2, 4, 1])
    x = torch.randn(6, 4, 5, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(directions, 4, 4, dtype=torch.float64, requires_grad=True)
    target = torch.randn(6, 4, directions * 4, dtype=torch.float64)
    results = []
    for run in (rnn, lambda *a: reference_frozen(rnn, *a)):
        out, h = run(x, hidden, lengths)
        loss = (out * target).sum() + (h * h).sum()
        results.append((out, h, _grads(rnn, loss, x, hidden)))
    (out_f, h_f, g_f), (out_r, h_r, g_r) = results
    torch.testing.assert_close(out_f, out_r, **TOL)
    torch.testing.assert_close(h_f, h_r, **TOL)
    for gf, gr in zip(g_f, g_r):
        torch.testing.assert_close(gf, gr, **TOL)


@pytest.mark.parametrize("directions", [1, 2])
def test_frozen_cell_padded_batch_equals_each_sentence_alone(directions):
    torch.manual_seed(0)
    rnn = FrozenRNN(load("DARTS_V2"), 5, 4, directions=directions)
    lengths = torch.tensor([3, 7, 1, 5])
    x = torch.randn(7, 4, 5)
    x[torch.arange(7).unsqueeze(1) >= lengths] = 99.0  # padding must not leak into anything
    with torch.inference_mode():
        out, h = rnn(x, lengths=lengths)
        for b, n in enumerate(lengths.tolist()):
            alone, h_alone = rnn(x[:n, b : b + 1])
            torch.testing.assert_close(out[:n, b], alone[:, 0], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(h[:, b], h_alone[:, 0], rtol=1e-5, atol=1e-6)
            assert (out[n:, b] == 0).all()
