"""NASABN attention: dot product by hand, causality and padding, the searched mix and its argmax."""

import math

import pytest
import torch

from nas.cells import genotype
from nas.cells.attention import DotAttention, MultiHeadAttention, SearchAttention
from nas.cells.cell import FrozenRNN


def test_dot_attention_equals_hand_computation():
    hs = [[0.5, -1.0], [2.0, 0.3], [-0.7, 0.8]]
    expected = []
    for t, q in enumerate(hs):
        scores = [sum(a * b for a, b in zip(q, k)) / math.sqrt(2) for k in hs[: t + 1]]  # causal: s ≤ t
        weights = [math.exp(s) / sum(math.exp(u) for u in scores) for s in scores]
        expected.append([sum(w * k[c] for w, k in zip(weights, hs)) for c in range(2)])
    out = DotAttention()(torch.tensor(hs).view(3, 1, 2), causal=True)
    assert out.view(3, 2).tolist() == [pytest.approx(row, rel=1e-6) for row in expected]


@pytest.mark.parametrize("layer", [DotAttention(), MultiHeadAttention(6, heads=4)])
def test_causal_attention_never_reads_later_steps(layer):
    torch.manual_seed(0)
    h = torch.randn(5, 2, 6)
    out = layer(h, causal=True)
    for t in range(4):
        moved = h.clone()
        moved[t + 1] += 1.0
        again = layer(moved, causal=True)
        assert torch.allclose(again[: t + 1], out[: t + 1], atol=1e-7)
        assert not torch.allclose(again[t + 1], out[t + 1])
    assert not torch.allclose(layer(h, causal=False)[0], out[0])  # without the mask step 0 reads the rest


@pytest.mark.parametrize("layer", [DotAttention(), MultiHeadAttention(6, heads=4)])
def test_padded_keys_are_ignored(layer):
    torch.manual_seed(1)
    h, lengths = torch.randn(5, 3, 6), torch.tensor([5, 3, 1])
    out = layer(h, causal=False, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        assert torch.allclose(out[:n, b], layer(h[:n, b : b + 1], causal=False)[:, 0], atol=1e-6)


def test_multihead_parameter_count():
    # 4 bias-free projections between 6 and 4 heads × ⌈6/4⌉ = 8 dimensions
    assert sum(p.numel() for p in MultiHeadAttention(6, heads=4).parameters()) == 4 * 6 * 8


def test_search_mix_sums_to_one_is_the_weighted_sum_and_derives_the_argmax():
    torch.manual_seed(2)
    att = SearchAttention(6, heads=2)
    h = torch.randn(4, 2, 6)
    for alpha, kind in (([0.3, 1.2], "multihead"), ([2.0, -1.0], "dot")):
        with torch.no_grad():
            att.alpha.copy_(torch.tensor(alpha))
        w = att.mixing_weights()
        assert w.sum().item() == pytest.approx(1.0, abs=1e-7)
        e = [math.exp(a) for a in alpha]
        assert w.tolist() == pytest.approx([v / sum(e) for v in e], rel=1e-6)
        mixed = w[0] * DotAttention()(h, True) + w[1] * att.candidates[1](h, True)
        assert torch.allclose(att(h, causal=True), mixed, atol=1e-6)
        assert att.derive() == kind


def test_shipped_nasabn_cell_builds_with_parameter_free_dot_attention():
    geno = genotype.load("nasabn_n1")
    assert geno.attention == "dot"
    rnn = FrozenRNN(geno, 8, 8).eval()
    assert isinstance(rnn.attention, DotAttention)
    assert sum(p.numel() for p in rnn.parameters()) == (8 + 8) * 16 + 5 * 8 * 16  # the cell's weights only
    x = torch.randn(6, 2, 8)
    out, hidden = rnn(x)
    plain = FrozenRNN(genotype.Genotype(geno.nodes, geno.concat), 8, 8).eval()
    plain.load_state_dict(rnn.state_dict())
    h, last = plain(x)
    assert torch.allclose(out, DotAttention()(h, causal=True), atol=1e-6) and torch.equal(hidden, last)
