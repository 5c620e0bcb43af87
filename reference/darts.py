"""Slow, obviously correct references for the fast cells and the α step: docs/concepts/cell.md and search-methods.md
written out literally.

The cells run one time step, one node, one edge and one op at a time in Python, with the input
projection x·W0 inside the loop, as in the reference DARTS code's structure; the α step has that
code's structure too (full backward passes, a copied model for the unrolled weights, weights
perturbed in place). The fast versions must agree with these (tests/test_reference_cells.py) and
bench/search_step.py times them side by side.

Nothing here comes from the modules it checks: own parameters, op table, softmaxes, masks, loss
and optimiser set-up, in plain torch. Only the weights are shared, by name: a test copies the fast
module's state dict into `ReferenceSearchRNN`, and `reference_frozen` reads a FrozenRNN's `w0`,
`ws` and genotype.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

OPS = ("none", "identity", "tanh", "relu", "sigmoid")  # the columns of α (docs/concepts/search-methods.md)
ACT = {"identity": lambda t: t, "tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}


def reference_mixing_weights(alpha: torch.Tensor, steps: int, method: str) -> torch.Tensor:
    """Rows of α are the edges (node 1: j=0; node 2: j=0,1; ...); softmax per edge or per node."""
    rows, row = [], 0
    for i in range(1, steps + 1):
        block = alpha[row : row + i]
        if method == "darts":
            rows.append(torch.stack([F.softmax(block[j], 0) for j in range(i)]))
        else:
            rows.append(F.softmax(block.reshape(-1), 0).view(i, -1))
        row += i
    return torch.cat(rows)


def _mask(like: torch.Tensor, p: float, shape: tuple[int, ...]) -> torch.Tensor | None:
    # Drawn in the fast cell's order and shapes, so a seeded run sees the same masks as the fast cell.
    if p <= 0:
        return None
    return like.new_empty(shape).bernoulli_(1 - p) / (1 - p)


class ReferenceSearchRNN(nn.Module):
    """The search cell per step, per node, per edge (one matmul each) and per op.

    Takes SearchRNN's arguments (the method's name in place of its mixing rule), so
    bench/search_step.py can swap it in; it has no ESS gates or attention. Its parameters have
    SearchRNN's names and shapes, and are drawn in the same order (so a seeded bench starts both
    from the same weights; tests copy them by name).
    """

    def __init__(
        self,
        ninp: int,
        nhid: int,
        steps: int = 8,
        method: str = "darts",
        dropout_x: float = 0.0,
        dropout_h: float = 0.0,
        inter: nn.Module | None = None,
        attention: nn.Module | None = None,
        compile: bool = False,
    ):
        super().__init__()
        if inter is not None or attention is not None:
            raise ValueError("the reference search cell has no inter-cell gates or attention")
        self.ninp, self.nhid, self.steps, self.method = ninp, nhid, steps, method
        self.dropout_x, self.dropout_h = dropout_x, dropout_h
        self.w0 = nn.Parameter(torch.empty(ninp + nhid, 2 * nhid).uniform_(-0.04, 0.04))  # [x | h]·W0
        self.ws = nn.ParameterList(
            nn.Parameter(torch.empty(nhid, 2 * nhid).uniform_(-0.04, 0.04)) for _ in range(steps)
        )
        self.alpha = nn.Parameter(1e-3 * torch.randn(steps * (steps + 1) // 2, len(OPS)))
        self.bn = nn.BatchNorm1d(nhid, affine=False)

    @property
    def output_size(self) -> int:
        return self.nhid

    def init_hidden(self, batch: int) -> torch.Tensor:
        return self.w0.new_zeros(1, batch, self.nhid)

    def forward(
        self, x: torch.Tensor, hidden: torch.Tensor | None = None, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        T, B, _ = x.shape
        H = self.nhid
        h = x.new_zeros(B, H) if hidden is None else hidden[0]
        mx = mh = None
        if self.training:
            mx = _mask(x, self.dropout_x, (B, self.ninp))
            mh = _mask(x, self.dropout_h, (B, H))
        weights = reference_mixing_weights(self.alpha, self.steps, self.method)
        outputs = []
        for t in range(T):
            xt = x[t] if mx is None else x[t] * mx
            ht = h if mh is None else h * mh
            c0, h0 = (torch.cat([xt, ht], 1) @ self.w0).split(H, 1)
            states = [self.bn(h + torch.sigmoid(c0) * (torch.tanh(h0) - h))]
            row = 0
            for i in range(self.steps):
                s = torch.zeros_like(h)
                for prev in states:
                    c, hh = ((prev if mh is None else prev * mh) @ self.ws[i]).split(H, 1)
                    for k, op in enumerate(OPS):
                        if op != "none":
                            s = s + weights[row, k] * (prev + torch.sigmoid(c) * (ACT[op](hh) - prev))
                    row += 1
                states.append(self.bn(s))
            h = torch.stack(states[1:]).mean(0)
            outputs.append(h)
        return torch.stack(outputs), h.unsqueeze(0)


def load_weights(reference: nn.Module, model: nn.Module) -> None:
    """`model`'s parameters into a reference model, by name. BatchNorm statistics stay the
    reference's own: ours are one module per state (`nas.cells.search_cell.node_norms`), DARTS's one for all."""
    state = {k: v for k, v in model.state_dict().items() if ".bn." not in f".{k}"}
    result = reference.load_state_dict(state, strict=False)
    assert not result.unexpected_keys and all(".bn." in f".{k}" for k in result.missing_keys), result


def reference_frozen(
    rnn: nn.Module, x: torch.Tensor, hidden: torch.Tensor | None = None, lengths: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A FrozenRNN without dropout, one sentence, one direction, one step and one edge at a time.

    Reads the layer's genotype and weights: w0 (D, ninp + nhid, 2·nhid), ws (D, nodes, nhid, 2·nhid).
    Direction 2 reads each sentence reversed within its length; its outputs are put back in
    sentence order. Outputs past a sentence's length are zero.
    """
    T, B, _ = x.shape
    D, H, geno = rnn.directions, rnn.nhid, rnn.genotype
    lengths = [T] * B if lengths is None else [int(n) for n in lengths]
    out = x.new_zeros(T, B, D * H)
    last = []
    for d in range(D):
        finals = []
        for b in range(B):
            n = lengths[b]
            h = x.new_zeros(H) if hidden is None else hidden[d, b]
            positions = list(range(n)) if d == 0 else list(reversed(range(n)))
            for t in positions:
                c0, h0 = (torch.cat([x[t, b], h]) @ rnn.w0[d]).split(H)
                states = {0: h + torch.sigmoid(c0) * (torch.tanh(h0) - h)}
                for i, node in enumerate(geno.nodes, start=1):
                    s = torch.zeros_like(h)
                    for op, pred in node:
                        prev = states[pred]
                        c, hh = (prev @ rnn.ws[d, i - 1]).split(H)
                        s = s + prev + torch.sigmoid(c) * (ACT[op](hh) - prev)
                    states[i] = s
                h = torch.stack([states[k] for k in geno.concat]).mean(0)
                out[t, b, d * H : (d + 1) * H] = h
            finals.append(h)
        last.append(torch.stack(finals))
    return out, torch.stack(last)


class ReferenceArchitect:
    """The α step as the reference DARTS code does it, for an RNNModel (words → logits, hidden, ...).

    Takes Architect's arguments; α are the parameters named `alpha...` (those in `arch_names`
    only, when given), the weights all others. The loss is the mean token cross-entropy.
    First order: `loss.backward()`, so every weight gradient is computed too (and discarded by
    the weight step's zero_grad). Second order: weight gradients on train clipped in place
    (coefficient k), a deep copy of the model holding w' = w − η(∇w + wd·w), a full backward
    through it on the validation batch, v clipped in place, then the finite-difference
    Hessian-vector product with the model's weights shifted in place by ±R·v, scaled by η·k.
    Both sides of the difference draw the same dropout masks, as in `Architect`.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float = 3e-3,
        weight_decay: float = 1e-3,
        order: int = 1,
        weight_wd: float = 5e-7,
        arch_names: list[str] | None = None,
        weight_clip: float | None = None,
    ):
        self.model, self.order, self.weight_wd, self.weight_clip = model, order, weight_wd, weight_clip
        named = dict(model.named_parameters())
        is_alpha = {name: name.rsplit(".", 1)[-1].startswith("alpha") for name in named}
        self.weights = {name: p for name, p in named.items() if not is_alpha[name]}
        self.arch = {
            name: p for name, p in named.items() if is_alpha[name] and (arch_names is None or name in arch_names)
        }
        self.optimizer = torch.optim.Adam(self.arch.values(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)

    def _loss(self, model: nn.Module, batch, hidden):
        logits, hidden, _, _ = model(batch[0], hidden)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), batch[1].reshape(-1)), hidden

    def step(self, train, train_hidden, valid, valid_hidden, eta: float):
        if self.order == 1:
            loss, valid_hidden = self._loss(self.model, valid, valid_hidden)
            loss.backward()
        else:
            valid_hidden = self._unrolled_backward(train, train_hidden, valid, valid_hidden, eta)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return valid_hidden

    def _unrolled_backward(self, train, train_hidden, valid, valid_hidden, eta: float):
        loss, _ = self._loss(self.model, train, train_hidden)
        grads = torch.autograd.grad(loss, list(self.weights.values()))
        k = _clip_(grads, self.weight_clip)
        unrolled = copy.deepcopy(self.model)
        with torch.no_grad():
            for (name, w), g in zip(self.weights.items(), grads):
                unrolled.get_parameter(name).copy_(w - eta * (g + self.weight_wd * w))
        unrolled.zero_grad(set_to_none=True)
        loss, valid_hidden = self._loss(unrolled, valid, valid_hidden)
        loss.backward()
        v = [unrolled.get_parameter(name).grad for name in self.weights]
        _clip_(v, self.weight_clip)
        r = 0.01 / torch.cat([x.view(-1) for x in v]).norm()
        device = v[0].device
        sides = []
        for shift in (r, -2 * r):
            with torch.no_grad():
                for w, x in zip(self.weights.values(), v):
                    w.add_(shift * x)
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                loss, _ = self._loss(self.model, train, train_hidden)
                sides.append(torch.autograd.grad(loss, list(self.arch.values())))
        with torch.no_grad():
            for w, x in zip(self.weights.values(), v):
                w.add_(r * x)
        for name, p, gp, gm in zip(self.arch, self.arch.values(), *sides):
            p.grad = unrolled.get_parameter(name).grad - eta * k * (gp - gm) / (2 * r)
        return valid_hidden


def _clip_(grads, max_norm) -> float:
    """Scale grads in place to norm ≤ max_norm, as the DARTS code's helper; returns the factor applied."""
    if max_norm is None:
        return 1.0
    norm = torch.cat([g.reshape(-1) for g in grads]).norm().item()
    k = min(1.0, max_norm / (norm + 1e-6))
    with torch.no_grad():
        for g in grads:
            g.mul_(k)
    return k
