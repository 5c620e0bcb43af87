import math

import pytest
import torch

from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype
from nas.methods.darts import Darts
from nas.methods.idarts import IDarts
from nas.cells.ops import edge_offsets
from nas.cells.search_cell import SearchRNN


def sig(v):
    return 1 / (1 + math.exp(-v))


def test_frozen_cell_equals_hand_computation():
    # node 1 = tanh(s0); node 2 = relu(s1) + identity(s0) (two inputs add up); output = mean(s1, s2)
    geno = Genotype(((("tanh", 0),), (("relu", 1), ("identity", 0))), (1, 2))
    rnn = FrozenRNN(geno, ninp=1, nhid=1).eval()
    w0 = [[0.5, -0.3], [0.2, 0.8]]  # rows: x, h ; columns: c, h
    w1, w2 = [0.7, 1.1], [-0.4, 0.9]
    with torch.no_grad():
        rnn.w0.copy_(torch.tensor([w0]))
        rnn.ws.copy_(torch.tensor([[[w1], [w2]]]))
    xs, h = [0.5, -1.0], 0.3
    expected = []
    for x in xs:
        c0, h0 = x * w0[0][0] + h * w0[1][0], x * w0[0][1] + h * w0[1][1]
        s0 = h + sig(c0) * (math.tanh(h0) - h)
        s1 = s0 + sig(s0 * w1[0]) * (math.tanh(s0 * w1[1]) - s0)
        s2 = (s1 + sig(s1 * w2[0]) * (max(s1 * w2[1], 0.0) - s1)) + (s0 + sig(s0 * w2[0]) * (s0 * w2[1] - s0))
        h = (s1 + s2) / 2
        expected.append(h)
    out, last = rnn(torch.tensor(xs).view(2, 1, 1), torch.tensor([[[0.3]]]))
    assert out.view(-1).tolist() == pytest.approx(expected, rel=1e-6)
    assert last.item() == pytest.approx(expected[-1], rel=1e-6)


def test_input_dropout_mask_is_drawn_once_per_sequence():
    torch.manual_seed(0)
    geno = Genotype(((("relu", 0),),), (1,))
    rnn = FrozenRNN(geno, ninp=16, nhid=4, dropout_x=0.5).train()
    x = torch.randn(6, 3, 16, requires_grad=True)
    rnn(x)[0].sum().backward()
    dropped = x.grad == 0  # (T, B, ninp)
    assert dropped.any() and not dropped.all()
    assert torch.equal(dropped, dropped[:1].expand_as(dropped))  # same features dropped at every step


def test_normalisations_sum_to_one_over_the_right_sets():
    steps = 4
    alpha = torch.randn(steps * (steps + 1) // 2, 5)
    per_edge = Darts.rule.normalise(alpha, steps)
    assert torch.allclose(per_edge.sum(1), torch.ones(len(alpha)))
    per_node = IDarts.rule.normalise(alpha, steps)
    off = edge_offsets(steps)
    for i in range(steps):
        assert per_node[off[i] : off[i + 1]].sum().item() == pytest.approx(1.0, abs=1e-6)
    assert not torch.allclose(per_node.sum(1), torch.ones(len(alpha)))  # not per edge


def test_derivation_from_hand_set_weights():
    # 3 nodes -> edges: (0->1), (0->2), (1->2), (0->3), (1->3), (2->3); ops: none identity tanh relu sigmoid
    w = torch.full((6, 5), 0.01)
    w[0] = torch.tensor([0.9, 0.01, 0.02, 0.05, 0.015])  # none wins, relu is the best real op
    w[1, 2] = 0.30  # node 2: tanh from 0 ...
    w[2, 4] = 0.40  # ... loses to sigmoid from 1
    w[3, 1] = 0.20  # node 3: identity from 0 (second)
    w[5, 3] = 0.25  # relu from 2 (first)
    w[4, 0] = 0.99  # none from 1 is never kept
    assert Darts.rule.derive(w, 3) == [[("relu", 0)], [("sigmoid", 1)], [("relu", 2)]]
    assert IDarts.rule.derive(w, 3, top_n=2) == [
        [("relu", 0), ("tanh", 0)],
        [("sigmoid", 1), ("tanh", 0)],
        [("relu", 2), ("identity", 0)],
    ]


def test_search_cell_with_one_hot_weights_is_the_derived_frozen_cell():
    torch.manual_seed(1)
    steps, ninp, nhid = 3, 5, 4
    search = SearchRNN(ninp, nhid, steps, IDarts.rule).eval()
    picks = {0: (0, "tanh"), 1: (1, "relu"), 2: (0, "sigmoid")}  # node index -> (predecessor, op)
    with torch.no_grad():
        search.alpha.fill_(-50.0)
        off = edge_offsets(steps)
        for i, (pred, op) in picks.items():
            search.alpha[off[i] + pred, ["none", "identity", "tanh", "relu", "sigmoid"].index(op)] = 50.0
    geno = search.genotype()
    assert geno.nodes == tuple(((op, pred),) for pred, op in picks.values())
    frozen = FrozenRNN(geno, ninp, nhid).eval()
    with torch.no_grad():
        frozen.w0.copy_(search.w0.unsqueeze(0))
        frozen.ws.copy_(torch.stack(list(search.ws)).unsqueeze(0))
    x = torch.randn(5, 2, ninp)
    # eval-mode BatchNorm at its initial statistics scales by 1/sqrt(1 + 1e-5): a tiny, known difference
    assert torch.allclose(search(x)[0], frozen(x)[0], rtol=1e-3, atol=1e-4)


def test_bidirectional_padded_batch_equals_each_sentence_alone():
    torch.manual_seed(2)
    from nas.cells.genotype import load

    rnn = FrozenRNN(load("darts_v2"), 6, 5, directions=2).eval()
    x, lengths = torch.randn(7, 3, 6), torch.tensor([7, 4, 1])
    out, last = rnn(x, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, h = rnn(x[:n, b : b + 1])
        assert torch.allclose(alone[:, 0], out[:n, b], atol=1e-6)
        assert torch.allclose(h[:, 0], last[:, b], atol=1e-6)
        assert out[n:, b].abs().sum() == 0
