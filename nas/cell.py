"""The frozen DARTS recurrent cell (NOTES §1), run over whole sequences.

`FrozenRNN` is the one recurrent layer the language model and the tagger share. It holds the
cell of a genotype for one or two directions (two for a BiRNN: the second direction reads each
sequence reversed within its length), with separate weights per direction stacked on a leading
axis so both directions run in the same batched matmuls.

Per step, with variational masks m_x, m_h drawn once per sequence:
    [c0 | h0] = (x_t ⊙ m_x)·W0x + (h_{t-1} ⊙ m_h)·W0h,   s0 = h_{t-1} + σ(c0)⊙(tanh(h0) − h_{t-1})
    [c | h]   = (s_j ⊙ m_h)·W_i,                          s_i = Σ_inputs s_j + σ(c)⊙(f(h) − s_j)
    h_t = mean(s_k for k in concat)
The x·W0x half is computed for all steps before the loop. Nodes whose inputs are ready form a
wave; each wave is one batched matmul per step.

A genotype may add the ESS inter-cell gates (`nas.gates`: the cell then reads ĥ_{t-1} and x̂_t)
and a NASABN attention layer over the output sequence (`nas.attention`), both run here too.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import build_attention
from .distributed import batch_mask
from .fused_cell import fused_frozen_cell, plan
from .genotype import Genotype
from .step_weights import StepWeight

INIT_RANGE = 0.04
ACTIVATIONS = {"identity": lambda t: t, "tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}


def highway(prev: torch.Tensor, c: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """s = prev + σ(c)⊙(h − prev), with h already activated."""
    return prev + torch.sigmoid(c) * (h - prev)


def variational_mask(like: torch.Tensor, p: float, shape: tuple[int, ...]) -> torch.Tensor | None:
    """A dropout mask drawn once per sequence and reused at every step (None when off); batch at dim −2."""
    if p <= 0:
        return None
    return batch_mask(like, p, shape)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence of a (T, B, ...) padded batch within its own length; padding stays put."""
    steps = torch.arange(x.size(0), device=x.device).unsqueeze(1)
    lengths = lengths.to(x.device).unsqueeze(0)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return x.gather(0, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


Step = Callable[[int, "torch.Tensor | None", torch.Tensor], torch.Tensor]


def run_recurrence(step: Step, h: torch.Tensor, steps: int, gates: nn.Module | None = None,
                   x: torch.Tensor | None = None, history: tuple[torch.Tensor, torch.Tensor] | None = None,
                   packing: "Packing | None" = None) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """The time loop every recurrent layer shares: h_t = step(t, x_gate, h_in) for t < steps.

    Without gates, x_gate is None and h_in = h_{t-1}. With ESS gates (`nas.gates`), over x
    (T, ..., ninp) and the carried `history` (x_hist, h_hist), each (m, ..., ·) most recent first
    and zero at a sequence start:
        h_in = h_{t-1} ⊙ f′(x_{t-m..t-1})   (inputs only: computed for every t before the loop)
        x_gate = g′(h_{t-m..t-1})           (the step scales x_t by it)
    so the output at t never depends on inputs after t.

    With a `packing` of a padded batch (lengths at least 1, sorted longest first; batch at dim −2
    everywhere), step t runs only the sequences still going, as in a packed sequence: a prefix
    of the batch, h_in has `packing.counts[t]` rows, and `step` takes its inputs for that many. The outputs are zero past each length, and
    the last h and history are each sequence's own. Returns (outputs (T, ...), last h, history).
    """
    B = h.size(-2)
    counts = [B] * steps if packing is None else packing.counts
    outputs, histories = [], []
    if gates is not None:
        x_hist, h_hist = history
        m = x_hist.size(0)
        xs = torch.cat([x_hist.flip(0), x])  # x_{-m} .. x_{T-1}: the zero (or carried) past, then x
        f_gate = gates.f(torch.stack([xs[m - i: m - i + steps] for i in range(1, m + 1)])).unbind(0)  # [i-1][t] = x_{t-i}
    for t, n in enumerate(counts):
        if n < h.size(-2):  # the sequences that ended drop out
            h = h[..., :n, :]
            h_hist = h_hist[..., :n, :] if gates is not None else None
        if gates is None:
            h = step(t, None, h)
        else:
            f = f_gate[t] if n == B else f_gate[t][..., :n, :]
            h = step(t, gates.g(h_hist.unsqueeze(1))[0], h * f)
            h_hist = torch.cat([h.unsqueeze(0), h_hist[:-1]])
            histories.append(h_hist)
        outputs.append(h)
    if packing is None:
        out = torch.stack(outputs)
    else:  # outputs and histories are packed, step after step; unpack them, and take each sequence's last
        out, h = unpack(torch.cat(outputs, -2), packing, steps)
        if gates is not None:
            h_hist = torch.cat(histories, -2).index_select(-2, packing.last)
    if gates is None:
        return out, h, None
    if packing is None:
        x_hist = xs.flip(0)[:m]
    else:  # the last m inputs before each sequence's length
        ends = packing.lengths.view(*[1] * (x.dim() - 3), -1, 1)  # broadcast over the batch dim −2
        index = m + ends.unsqueeze(0) - torch.arange(1, m + 1, device=x.device).view(-1, *[1] * ends.dim())
        x_hist = xs.gather(0, index.expand(m, *x.shape[1:]))
    return out, h, (x_hist, h_hist)


class Packing(NamedTuple):
    """A padded batch sorted longest first, laid out step after step as a packed sequence."""

    lengths: torch.Tensor  # (B,)
    counts: list[int]  # per step, the sequences still going (a prefix of the batch)
    rows: torch.Tensor  # each packed row's index t·B + b in the padded (T, B) layout
    last: torch.Tensor  # (B,) the packed row of each sequence's last step


def unpack(packed: torch.Tensor, packing: Packing, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed rows (..., R, H) as the padded (T, ..., B, H), zero past each length, and each sequence's last row."""
    B = packing.lengths.numel()
    out = packed.new_zeros(*packed.shape[:-2], steps * B, packed.size(-1)).index_copy(-2, packing.rows, packed)
    return out.view(*packed.shape[:-2], steps, B, -1).movedim(-3, 0), packed.index_select(-2, packing.last)


def pack_batch(lengths: torch.Tensor, steps: int) -> Packing:
    real = torch.arange(steps, device=lengths.device).unsqueeze(1) < lengths  # (T, B)
    counts = real.sum(1)
    offsets = torch.cumsum(counts, 0) - counts  # first packed row of each step
    last = offsets[lengths - 1] + torch.arange(lengths.numel(), device=lengths.device)
    return Packing(lengths, counts.tolist(), real.view(-1).nonzero().squeeze(1), last)


def _batch_take(state, index: torch.Tensor):
    """A hidden state (a tensor or a tuple of them, batch at dim −2) with its batch rows reordered."""
    if isinstance(state, torch.Tensor):
        return state.index_select(-2, index)
    return tuple(_batch_take(part, index) for part in state)


def _plan_waves(geno: Genotype) -> list[list[tuple[int, int, str]]]:
    """Group the cell's edges (node, predecessor, op) into waves of nodes computable together."""
    depth = {0: 0}
    for i, node in enumerate(geno.nodes, start=1):
        depth[i] = 1 + max(depth[pred] for _, pred in node)
    waves: list[list[tuple[int, int, str]]] = [[] for _ in range(max(depth.values()))]
    for i, node in enumerate(geno.nodes, start=1):
        for op, pred in node:
            waves[depth[i] - 1].append((i, pred, op))
    return [sorted(w, key=lambda e: (e[2], e[0])) for w in waves]  # same ops side by side


class FrozenRNN(nn.Module):
    """A genotype's cell as a sequence layer: (T, B, ninp) -> (T, B, directions·nhid).

    With inter-cell gates the hidden state is the tuple (h, x_hist, h_hist), where the histories
    (m, directions, B, ·) hold the last m layer inputs and states, so a language model carries
    them across batches; otherwise it is h (directions, B, nhid). `inter` and `attention` replace
    the genotype's own (the inter-only search wraps a fixed cell in searchable gates).

    Without gates the time loop runs as one autograd Function with a hand-written backward
    (`nas.fused_cell`; the attention layer after it stays on autograd). `fused=False` (or setting
    `.fused`) runs it op by op through autograd instead, as it always does with gates and under
    autocast (bf16 GEMMs there beat the fused loop in fp32: docs/fused.md).
    """

    def __init__(self, genotype: Genotype, ninp: int, nhid: int, directions: int = 1,
                 dropout_x: float = 0.0, dropout_h: float = 0.0, attention_heads: int = 4,
                 inter: nn.Module | None = None, attention: nn.Module | None = None, fused: bool = True):
        super().__init__()
        self.fused = fused
        self.genotype, self.ninp, self.nhid, self.directions = genotype, ninp, nhid, directions
        self.dropout_x, self.dropout_h = dropout_x, dropout_h
        steps = genotype.steps
        self.w0 = nn.Parameter(torch.empty(directions, ninp + nhid, 2 * nhid).uniform_(-INIT_RANGE, INIT_RANGE))
        self.ws = nn.Parameter(torch.empty(directions, steps, nhid, 2 * nhid).uniform_(-INIT_RANGE, INIT_RANGE))
        if inter is None and genotype.inter is not None:
            from .gates import InterGates  # the gates build on this module's ops

            inter = InterGates.frozen(genotype.inter, ninp, nhid, directions)
        if attention is None and genotype.attention is not None:
            attention = build_attention(genotype.attention, directions * nhid, attention_heads)
        self.inter, self.attention = inter, attention
        self._waves = _plan_waves(genotype)
        self._runs = [_runs(wave) for wave in self._waves]
        self._plan = plan(self._waves, genotype.concat, steps)
        # The node matrices of every edge in wave order: one gather per forward (one zero-filled
        # gradient of ws in the backward pass), then split into the waves.
        self.register_buffer("_edge_nodes", torch.tensor([i - 1 for wave in self._waves for i, _, _ in wave]),
                             persistent=False)

    @property
    def output_size(self) -> int:
        return self.directions * self.nhid

    def init_hidden(self, batch: int) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.w0.new_zeros(self.directions, batch, self.nhid)
        if self.inter is None:
            return h
        m, D = self.inter.history, self.directions
        return h, self.w0.new_zeros(m, D, batch, self.ninp), self.w0.new_zeros(m, D, batch, self.nhid)

    def forward(self, x: torch.Tensor, hidden=None, lengths: torch.Tensor | None = None):
        """Run the cell over x (T, B, ninp); `lengths` (B,) marks valid prefixes of a padded batch.

        Returns the outputs (T, B, directions·nhid), zero past each length, and the hidden state
        after the last valid step (see the class docstring). The backward direction reads each
        sequence reversed, so for it the gates' "past" is the later positions.
        """
        T, B, _ = x.shape
        D, H = self.directions, self.nhid
        order = pack = None
        if lengths is not None and bool((lengths < T).any()):
            # Longest first, so the sequences still running at any step are a prefix of the batch.
            lengths = lengths.to(x.device)
            if int(lengths.min()) < 1:
                raise ValueError("FrozenRNN: every sequence needs at least one step")
            order = torch.argsort(lengths, descending=True, stable=True)
            x, lengths = x[:, order], lengths[order]
            hidden = None if hidden is None else _batch_take(hidden, order)
            pack = pack_batch(lengths, T)
        if D == 2:
            if lengths is None:
                lengths = torch.full((B,), T, dtype=torch.long)
            x = torch.stack([x, reverse_padded(x, lengths)], 1)  # (T, D, B, ninp)
        else:
            x = x.unsqueeze(1)
        hidden = self.init_hidden(B) if hidden is None else hidden
        h, history = (hidden, None) if self.inter is None else (hidden[0], tuple(hidden[1:]))
        mx = mh = None
        if self.training:
            mx = variational_mask(x, self.dropout_x, (D, B, self.ninp))
            mh = variational_mask(x, self.dropout_h, (D, B, H))
        xin = x if mx is None else x * mx
        w0x, w0h = self.w0[:, : self.ninp], self.w0[:, self.ninp:]
        # Steps are unbound, not indexed: the backward pass then stacks their gradients once instead
        # of zero-filling a whole (T, D, B, ·) tensor per step.
        if self.inter is None:
            # Input projection of every step and direction in one batched GEMM outside the loop, over
            # the real positions only (padding would cost as much as the sentences), packed step
            # after step so that step t gets exactly the rows of the sequences still going.
            xin = xin.transpose(0, 1).reshape(D, T * B, self.ninp)
            if pack is not None:
                xin = xin[:, pack.rows]
            if self.fused and not torch.is_autocast_enabled(x.device.type):
                return self._finish(*self._fused(xin, h, mh, pack, T), None, lengths, order)
            xproj = torch.bmm(xin, w0x)
            xproj = xproj.view(D, T, B, 2 * H).unbind(1) if pack is None else xproj.split(pack.counts, 1)
        else:
            xsteps, w0x_steps = xin.unbind(0), StepWeight(w0x)
        # Weights the time loop multiplies by at every step: their gradients are summed in one GEMM.
        w0h = StepWeight(w0h)
        wave_w = [StepWeight(w.transpose(0, 1).reshape(-1, H, 2 * H))
                  for w in self.ws[:, self._edge_nodes].split([len(wave) for wave in self._waves], 1)]

        def step(t: int, x_gate: torch.Tensor | None, h_in: torch.Tensor) -> torch.Tensor:
            n = h_in.size(1)  # the sequences still running (all, without lengths)
            if x_gate is None:
                xp = xproj[t]
            else:
                xp = w0x_steps.matmul(xsteps[t][:, :n] * x_gate)  # x̂_t = x_t ⊙ g′
            return self._step(xp, h_in, w0h, wave_w, None if mh is None else mh[:, :n])

        out, h, history = run_recurrence(step, h, T, self.inter, x, history, pack)
        return self._finish(out, h, history, lengths, order)

    def _fused(self, xin: torch.Tensor, h: torch.Tensor, mh: torch.Tensor | None, pack: Packing | None,
               steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The time loop as one Function over packed rows xin (D, R, ninp): outputs (T, D, B, H), last h."""
        B = h.size(-2)
        packed = fused_frozen_cell(xin, h, self.w0, self.ws, mh, self._plan, [B] * steps if pack is None else pack.counts)
        if pack is not None:
            return unpack(packed, pack, steps)
        return packed.view(packed.size(0), steps, B, -1).movedim(1, 0), packed[:, -B:]

    def _finish(self, out: torch.Tensor, h: torch.Tensor, history: tuple | None, lengths: torch.Tensor | None,
                order: torch.Tensor | None):
        """From the loop's outputs (T, D, B, H) in sorted order to the layer's: directions side by side, the
        caller's batch order, then attention."""
        T, D = out.size(0), self.directions
        if D == 2:
            out = torch.cat([out[:, 0], reverse_padded(out[:, 1], lengths)], -1)
        else:
            out = out[:, 0]
        state = h if history is None else (h, *history)
        if order is not None:  # back to the caller's batch order
            restore = torch.argsort(order)
            out, lengths, state = out[:, restore], lengths[restore], _batch_take(state, restore)
        if self.attention is not None:
            # causal for one direction (the LM); a BiRNN has seen the whole sentence anyway
            out = self.attention(out, causal=D == 1, lengths=None if order is None else lengths)
            if order is not None:
                out = out * (torch.arange(T, device=out.device).unsqueeze(1) < lengths).unsqueeze(-1)
        return out, state

    def _step(self, xp: torch.Tensor, h: torch.Tensor, w0h: StepWeight,
              wave_w: list[StepWeight], mh: torch.Tensor | None) -> torch.Tensor:
        D, B, H = h.shape
        c0, h0 = (xp + w0h.matmul(h if mh is None else h * mh)).split(H, -1)
        states = {0: highway(h, c0, torch.tanh(h0))}
        for wave, runs, w in zip(self._waves, self._runs, wave_w):
            prev = torch.stack([states[pred] for _, pred, _ in wave])  # (E, D, B, H)
            inp = prev if mh is None else prev * mh
            c, hh = w.matmul(inp.view(-1, B, H)).view(len(wave), D, B, 2 * H).split(H, -1)
            act = torch.cat([ACTIVATIONS[op](hh[start:stop]) for op, start, stop in runs])
            for (node, _, _), new in zip(wave, highway(prev, c, act).unbind(0)):
                states[node] = new if node not in states else states[node] + new
        return torch.stack([states[k] for k in self.genotype.concat]).mean(0)


def _runs(wave: list[tuple[int, int, str]]) -> list[tuple[str, int, int]]:
    """Contiguous runs of the same op in a wave (edges are sorted by op)."""
    runs: list[tuple[str, int, int]] = []
    for e, (_, _, op) in enumerate(wave):
        if runs and runs[-1][0] == op:
            runs[-1] = (op, runs[-1][1], e + 1)
        else:
            runs.append((op, e, e + 1))
    return runs
