"""ESS inter-cell gates: the formula, causality (both directions), history carried across batches,
the genotype section, and the joint search's phases."""

import json
import math

import pytest
import torch
from click.testing import CliRunner

from nas.cells import genotype
from nas.cells.attention import SearchAttention
from nas.cells.cell import FrozenRNN
from nas.cli.search_lm import main as search_lm
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus
from nas.common.errors import InputError
from nas.cells.genotype import Genotype, validate
from nas.cells.gates import FrozenGate, InterGates, SearchGate
from nas.methods.darts import Darts
from nas.common.runs import RunDir
from nas.runs.config import SearchConfig
from nas.runs.search import Searcher
from nas.cells.search_cell import SearchRNN

OPS = ["none", "identity", "tanh", "relu", "sigmoid"]
TINY = [
    "--emsize",
    "8",
    "--nhid",
    "8",
    "--nodes",
    "2",
    "--batch-size",
    "4",
    "--bptt",
    "6",
    "--eval-batch-size",
    "2",
    "--lr",
    "2",
]


def sig(v):
    return 1 / (1 + math.exp(-v))


def gated(inter: dict, attention=None, nodes=((("relu", 0),), (("tanh", 1),), (("identity", 1),))) -> Genotype:
    return validate(
        {
            "version": 1,
            "nodes": [[list(e) for e in n] for n in nodes],
            "concat": list(range(1, len(nodes) + 1)),
            "inter": inter,
            "attention": attention,
        },
        "test",
    )


INTER = {
    "history": 2,
    "squash": "sigmoid",
    "size_match": "project",
    "f": [[["tanh", 0]], [["relu", 1], ["identity", 0]], [["sigmoid", 2]]],
    "g": [[["identity", 0]], [["tanh", 0]]],
}


def test_gated_cell_equals_hand_computation_with_zero_history_at_the_start():
    # one-dimensional: f′ = σ(tanh(x_{t-1}·wf)) gates h_{t-1}; g′ = σ(h_{t-1}·wg) gates x_t; cell node 1 = relu(s0)
    inter = {"history": 1, "squash": "sigmoid", "size_match": "project", "f": [[["tanh", 0]]], "g": [[["identity", 0]]]}
    rnn = FrozenRNN(gated(inter, nodes=((("relu", 0),),)), ninp=1, nhid=1).eval()
    w0, w1, wf, wg = [[0.5, -0.3], [0.2, 0.8]], [0.7, 1.1], 1.5, -0.9
    with torch.no_grad():
        rnn.w0.copy_(torch.tensor([w0]))
        rnn.ws.copy_(torch.tensor([[[w1]]]))
        rnn.inter.f.w_hist.fill_(wf)
        rnn.inter.g.w_hist.fill_(wg)
    xs, h, x_prev = [0.5, -1.0, 2.0], 0.0, 0.0
    expected = []
    for x in xs:
        h_hat = h * sig(math.tanh(x_prev * wf))  # x_{-1} = 0: the gate is σ(0) = 0.5 at t = 0
        x_hat = x * sig(h * wg)
        c0, h0 = x_hat * w0[0][0] + h_hat * w0[1][0], x_hat * w0[0][1] + h_hat * w0[1][1]
        s0 = h_hat + sig(c0) * (math.tanh(h0) - h_hat)
        h = s0 + sig(s0 * w1[0]) * (max(s0 * w1[1], 0.0) - s0)
        expected.append(h)
        x_prev = x
    out, (last, x_hist, h_hist) = rnn(torch.tensor(xs).view(3, 1, 1))
    assert out.view(-1).tolist() == pytest.approx(expected, rel=1e-6)
    assert last.item() == pytest.approx(expected[-1], rel=1e-6)
    assert x_hist.item() == 2.0 and h_hist.item() == pytest.approx(expected[-1], rel=1e-6)


def _perturbed(x, t, b=0):
    y = x.clone()
    y[t, b] += 1.0
    return y


@pytest.mark.parametrize("layer", ["frozen", "search"])
def test_gates_and_causal_attention_never_read_the_future(layer):
    torch.manual_seed(0)
    if layer == "frozen":
        rnn = FrozenRNN(gated(INTER, "multihead"), ninp=4, nhid=4, attention_heads=2).eval()
    else:
        rnn = SearchRNN(
            4,
            4,
            steps=3,
            rule=Darts.rule,
            inter=InterGates.search(4, 4, Darts.rule, history=2, nodes=3),
            attention=SearchAttention(4, heads=2),
        ).eval()
    x = torch.randn(6, 2, 4)
    out = rnn(x)[0]
    for t in range(5):
        moved = rnn(_perturbed(x, t + 1))[0]
        assert torch.allclose(moved[: t + 1], out[: t + 1], atol=1e-7)
        assert not torch.allclose(moved[t + 1], out[t + 1])  # the perturbation does reach step t+1


def test_backward_direction_is_causal_in_reversed_time_within_each_length():
    torch.manual_seed(1)
    rnn = FrozenRNN(gated(INTER), ninp=4, nhid=3, directions=2).eval()
    x, lengths, b, n = torch.randn(7, 3, 4), torch.tensor([7, 5, 3]), 1, 5
    out = rnn(x, lengths=lengths)[0]
    fwd, bwd = slice(0, 3), slice(3, 6)
    for t in range(1, n - 1):
        later = rnn(_perturbed(x, t + 1, b), lengths=lengths)[0]
        assert torch.allclose(later[: t + 1, b, fwd], out[: t + 1, b, fwd], atol=1e-7)
        assert not torch.allclose(later[t, b, bwd], out[t, b, bwd])  # the backward past is later positions
        earlier = rnn(_perturbed(x, t - 1, b), lengths=lengths)[0]
        assert torch.allclose(earlier[t:n, b, bwd], out[t:n, b, bwd], atol=1e-7)
        assert not torch.allclose(earlier[t, b, fwd], out[t, b, fwd])


def test_gated_bidirectional_padded_batch_equals_each_sentence_alone():
    torch.manual_seed(2)
    rnn = FrozenRNN(gated(INTER, "dot"), ninp=4, nhid=3, directions=2).eval()
    x, lengths = torch.randn(7, 3, 4), torch.tensor([7, 4, 1])
    out, (last, x_hist, h_hist) = rnn(x, lengths=lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, (h, xh, hh) = rnn(x[:n, b : b + 1])
        assert torch.allclose(alone[:, 0], out[:n, b], atol=1e-6)
        assert out[n:, b].abs().sum() == 0
        assert torch.allclose(h[:, 0], last[:, b], atol=1e-6)
        assert torch.equal(xh[:, :, 0], x_hist[:, :, b]) and torch.allclose(hh[:, :, 0], h_hist[:, :, b], atol=1e-6)


@pytest.mark.parametrize("layer", ["frozen", "search"])
def test_history_carried_across_batches_equals_one_long_sequence(layer):
    torch.manual_seed(3)
    if layer == "frozen":
        rnn = FrozenRNN(gated(INTER), ninp=4, nhid=4).eval()
    else:
        rnn = SearchRNN(
            4, 4, steps=2, rule=Darts.rule, inter=InterGates.search(4, 4, Darts.rule, history=3, nodes=3)
        ).eval()
    x = torch.randn(7, 2, 4)
    whole, _ = rnn(x)
    first, hidden = rnn(x[:3])
    second, _ = rnn(x[3:], hidden)
    assert torch.allclose(torch.cat([first, second]), whole, atol=1e-6)
    restarted, _ = rnn(x[3:])  # without the carried history the gates see zeros
    assert not torch.allclose(restarted, second)


@pytest.mark.parametrize("layer", ["frozen", "search"])
def test_the_time_loops_gate_has_the_gradients_of_the_plain_gate(layer, monkeypatch):
    """In the loop g′ runs `stepwise` (each weight's gradient formed once over all steps): the same
    outputs and gradients as calling the gate's own forward at every step, padded bidirectional batch included."""
    torch.manual_seed(5)
    if layer == "frozen":
        rnn = FrozenRNN(gated(INTER), ninp=4, nhid=3, directions=2, dropout_x=0.3, dropout_h=0.3).train()
        x, lengths = torch.randn(6, 3, 4, requires_grad=True), torch.tensor([6, 4, 1])
        plain = (FrozenGate, lambda self: lambda h: self(h.unsqueeze(1))[0])
    else:
        rnn = SearchRNN(
            4,
            3,
            steps=2,
            rule=Darts.rule,
            dropout_x=0.3,
            dropout_h=0.3,
            inter=InterGates.search(4, 3, Darts.rule, history=2, nodes=3),
        ).train()
        x, lengths = torch.randn(6, 3, 4, requires_grad=True), None
        plain = (SearchGate, lambda self: self)

    def run():
        torch.manual_seed(6)  # the same dropout masks
        out, _ = rnn(x, lengths=lengths)
        loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum()
        used = [x] + [p for p in rnn.parameters() if p.numel()]  # a gate without node sources has an empty w_node
        return [out, *torch.autograd.grad(loss, used)]

    stepwise = run()
    monkeypatch.setattr(*plain[:1], "stepwise", plain[1])
    names = ["out", "x"] + [n for n, p in rnn.named_parameters() if p.numel()]
    assert "inter.g.w_hist" in names
    for name, a, b in zip(names, stepwise, run(), strict=True):
        assert b.abs().max() > 0, name
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_search_gate_with_one_hot_weights_is_the_derived_frozen_gate():
    torch.manual_seed(4)
    search = SearchGate(history=2, nodes=3, d_src=5, d_gate=4, rule=Darts.rule, squash="2sigmoid")
    rows = {(1, 0): "tanh", (2, 1): "relu", (3, 2): "sigmoid"}  # (node, predecessor) -> op; layouts 1, 2, 2 rows
    with torch.no_grad():  # a softmax per edge: unused edges pick `none`
        search.alpha.fill_(-50.0)
        search.alpha[:, 0] = 50.0
        for row, op in ((0, "tanh"), (2, "relu"), (4, "sigmoid")):  # node 1 <- e_1; node 2 <- node 1 (row 1 is e_2);
            search.alpha[row] = -50.0  # node 3 <- node 2 (no e_3: rows 3, 4 are nodes 1, 2)
            search.alpha[row, OPS.index(op)] = 50.0
    nodes = search.derive()
    assert nodes == [[[op, pred]] for (_, pred), op in rows.items()]
    frozen = FrozenGate(nodes, 2, 5, 4, squash="2sigmoid")
    with torch.no_grad():
        frozen.w_hist.copy_(search.w_hist[[0]].unsqueeze(0))  # history source e_1 only
        frozen.w_node.copy_(search.w_node[[0, 1]].unsqueeze(0))  # node sources 1 and 2
    history = torch.randn(2, 3, 1, 2, 5)  # (m, L, D, B, d_src)
    assert torch.allclose(search(history), frozen(history), atol=1e-6)


def test_genotype_with_inter_and_attention_round_trips_and_has_the_expected_parameters(tmp_path):
    geno = Genotype(((("relu", 0),), (("tanh", 1),), (("identity", 1),)), (1, 2, 3), INTER, "multihead", "ess-test")
    genotype.save(geno, tmp_path / "cell.json")
    again = genotype.load(tmp_path / "cell.json")
    assert again == geno and again.inter == INTER and again.attention == "multihead"
    ninp, nhid = 6, 5
    # cell: W0 (ninp+nhid)×2nhid + 3 nodes × nhid×2nhid
    cell = (ninp + nhid) * 2 * nhid + 3 * nhid * 2 * nhid
    # f′ (x→h): history sources e1, e2 (nodes 1, 2 read pred 0) ninp×nhid each; node sources 1, 2: nhid×nhid each
    f = 2 * ninp * nhid + 2 * nhid * nhid
    # g′ (h→x): history sources e1, e2: nhid×ninp each; no node sources
    g = 2 * nhid * ninp
    for directions in (1, 2):
        size = directions * nhid
        inner = 2 * math.ceil(size / 2)  # 2 heads of ⌈size/2⌉
        attention = 3 * size * inner + inner * size
        rnn = FrozenRNN(again, ninp, nhid, directions=directions, attention_heads=2)
        assert sum(p.numel() for p in rnn.parameters()) == directions * (cell + f + g) + attention
    pad = dict(INTER, size_match="pad")  # every gate matrix square in the gated size
    rnn = FrozenRNN(Genotype(geno.nodes, geno.concat, pad), ninp, nhid)
    assert sum(p.numel() for p in rnn.inter.parameters()) == 2 * nhid * nhid + 2 * nhid * nhid + 2 * ninp * ninp


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda i: i["f"][2].__setitem__(0, ["relu", 0]), "inter.f[2][0]"),  # node 3 has no history vector (m = 2)
        (lambda i: i["g"][1].__setitem__(0, ["gelu", 1]), "inter.g[1][0]"),
        (lambda i: i.__setitem__("history", 4), "inter.f"),  # fewer nodes than history vectors
        (lambda i: i.__setitem__("squash", "softplus"), "inter.squash"),
        (lambda i: i.__setitem__("size_match", "crop"), "inter.size_match"),
        (lambda i: i.pop("g"), "inter.g"),
        (lambda i: i.__setitem__("colour", 1), "inter.colour"),
    ],
)
def test_each_bad_inter_field_is_named(tmp_path, mutate, field):
    inter = json.loads(json.dumps(INTER))
    mutate(inter)
    data = genotype.load("darts_v2").to_dict()
    data["inter"] = inter
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        genotype.load(tmp_path / "bad.json")
    assert f"field '{field}'" in str(err.value)


def _alphas(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("alpha")}


def test_each_phase_steps_only_its_own_alpha(lm_corpus, tmp_path):
    paths = find_splits(lm_corpus)
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        method="ess",
        search_space="joint",
        rounds=1,
        intra_steps=2,
        inter_steps=2,
        attention="search",
        emsize=8,
        nhid=8,
        nodes=2,
        batch_size=4,
        bptt=6,
        eval_batch_size=2,
        lr=2.0,
    )
    run = RunDir(tmp_path / "run")
    run.start({})
    searcher = Searcher(config, run, Corpus.load(paths))
    snaps = [_alphas(searcher.model)]
    searcher.run(on_batch=lambda s: snaps.append(_alphas(s.model)))
    assert len(snaps) == 5
    inter = [n for n in snaps[0] if ".inter." in n]
    intra = [n for n in snaps[0] if n not in inter]  # the cell's α and the attention α
    assert set(intra) == {"rnn.alpha", "rnn.attention.alpha"} and len(inter) == 2
    for before, after in zip(snaps[:2], snaps[1:3]):  # intra phase
        assert all(torch.equal(before[n], after[n]) for n in inter)
        assert all(not torch.equal(before[n], after[n]) for n in intra)
    for before, after in zip(snaps[2:4], snaps[3:5]):  # inter phase
        assert all(torch.equal(before[n], after[n]) for n in intra)
        assert all(not torch.equal(before[n], after[n]) for n in inter)


def test_two_round_joint_search_writes_a_valid_genotype_and_logs_both_mads(lm_corpus, tmp_path):
    out = tmp_path / "ess.json"
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(lm_corpus),
            "--method",
            "ess",
            "--rounds",
            "2",
            "--intra-steps",
            "2",
            "--inter-steps",
            "2",
            "--history",
            "2",
            "--inter-nodes",
            "3",
            "--attention",
            "search",
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(out),
            *TINY,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    geno = genotype.load(out)
    assert geno.steps == 2 and geno.attention in ("dot", "multihead")
    assert geno.inter["history"] == 2 and len(geno.inter["f"]) == len(geno.inter["g"]) == 3
    assert geno.provenance["method"] == "ess" and geno.provenance["epochs"] == 2
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [4, 8]
    assert all(r["mad"] > 0 and r["mad_inter"] > 0 for r in log)
    FrozenRNN(geno, 8, 8)(torch.randn(3, 2, 8))  # the written genotype builds and runs


def test_inter_only_search_keeps_the_given_cell(lm_corpus, tmp_path):
    out = tmp_path / "inter.json"
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(lm_corpus),
            "--method",
            "ess",
            "--search-space",
            "inter",
            "--cell",
            "nasabn_n1",
            "--rounds",
            "1",
            "--intra-steps",
            "1",
            "--inter-steps",
            "2",
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(out),
            *TINY,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    geno, cell = genotype.load(out), genotype.load("nasabn_n1")
    assert geno.nodes == cell.nodes and geno.attention == "dot" and geno.inter is not None
    log = json.loads((tmp_path / "run" / "log.jsonl").read_text())
    assert log["step"] == 3 and "mad" not in log and log["mad_inter"] > 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--method", "darts", "--rounds", "2"], "--rounds: only with --method ess"),
        (["--method", "ess", "--search-space", "inter"], "--cell: give the fixed intra cell"),
        (["--method", "ess", "--history", "4"], "--history 4: needs at least as many --inter-nodes"),
        (["--method", "ess", "--epochs", "2"], "--epochs: --method ess counts --rounds"),
    ],
)
def test_inconsistent_ess_flags_give_one_line_and_exit_2(lm_corpus, tmp_path, args, message):
    result = CliRunner().invoke(search_lm, ["--data", str(lm_corpus), "--run-dir", str(tmp_path / "run"), *args, *TINY])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr


def test_interrupted_joint_search_resumes_to_the_same_alphas_across_a_data_wraparound(tmp_path):
    from conftest import write_lm_corpus
    from nas.common.runs import Interrupted

    paths = find_splits(write_lm_corpus(tmp_path / "corpus", train_lines=30))  # ~10 batches: round 2 wraps around

    def searcher(name):
        config = SearchConfig(
            train=str(paths["train"]),
            valid=str(paths["valid"]),
            test=str(paths["test"]),
            method="ess",
            rounds=2,
            intra_steps=4,
            inter_steps=4,
            emsize=8,
            nhid=8,
            nodes=2,
            batch_size=4,
            bptt=6,
            eval_batch_size=2,
            lr=2.0,
            eval_batches=2,
        )
        run = RunDir(tmp_path / name)
        return run, Searcher(config, run, Corpus.load(paths))

    run, straight = searcher("straight")
    run.start({})
    straight.run()
    assert straight.steps_done == 16 > straight.full_epoch()
    run, first = searcher("interrupted")
    run.start({})

    def stop_in_second_inter_phase(s):
        if s.epoch == 1 and s.batch == 5:
            s.stop.request()

    with pytest.raises(Interrupted):
        first.run(on_batch=stop_in_second_inter_phase)
    _, resumed = searcher("interrupted")
    resumed.load_state(run.load_checkpoint())
    resumed.run()
    for name, value in _alphas(straight.model).items():
        assert torch.equal(_alphas(resumed.model)[name], value), name
