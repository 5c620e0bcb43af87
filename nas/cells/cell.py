"""The DARTS recurrent cell (Liu et al. 2019; docs/concepts/cell.md): its definition, and the frozen cell run over whole
sequences.

The definition, in readable Python: `first_node` and `highway` below, one time step of a
genotype's cell in `cell_step`. The search cell (`nas.cells.search_cell`) is the same cell with every
edge's ops mixed under mixing weights, and the sampled cell of random search and ENAS
(`nas.methods.weight_sharing`) the same cell with one drawn input per node; both are written with
these two functions. The fast paths in `nas/fast/` (a fused loop per cell with a hand-written
backward, its elementwise passes in C++) implement these equations, and tests/test_fused_cell.py
and tests/test_fused_search_cell.py check them against this code and the slow reference. They reach
the cells only as the `backend` a model's builder injects (`nas.cells.backend`); the cells import none.

One time step (`cell_step`), with variational dropout masks m_x, m_h drawn once per sequence:
    [c0 | h0] = (x_t ⊙ m_x)·W0x + (h_{t-1} ⊙ m_h)·W0h,   s0 = h_{t-1} + σ(c0)⊙(tanh(h0) − h_{t-1})
    [c | h]   = (s_j ⊙ m_h)·W_i,                          s_i = Σ_inputs s_j + σ(c)⊙(f(h) − s_j)
    h_t = mean(s_k for k in concat)
Nodes whose inputs are ready form a wave; each wave is one batched matmul per step.

`FrozenRNN` is the one recurrent layer the language model and the tagger share. It holds the
cell of a genotype for one or two directions (two for a BiRNN: the second direction reads each
sequence reversed within its length), with separate weights per direction stacked on a leading
axis so both directions run in the same batched matmuls. The x·W0x half is computed for all
steps before the loop. The time loop, padded batches and the reversed direction are
`nas.cells.recurrence`.

A genotype may add the ESS inter-cell gates (`nas.cells.gates`: the cell then reads ĥ_{t-1} and x̂_t)
and a NASABN attention layer over the output sequence (`nas.cells.attention`), both run here too.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nas.cells.attention import build_attention
from nas.cells.backend import DEFINITION, CellBackend, StepProduct, times
from nas.cells.gates import InterGates
from nas.cells.ops import Genotype
from nas.cells.masks import variational_mask
from nas.cells.ops import ACTIVATIONS, INIT_RANGE
from nas.cells.recurrence import PaddedBatch, run_recurrence
from nas.cells.waves import Wave, plan_waves


def highway(prev: torch.Tensor, c: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """An edge: s = prev + σ(c)⊙(h − prev), with h already activated, [c | h] = (prev ⊙ m_h)·W_i."""
    return prev + torch.sigmoid(c) * (h - prev)


def first_node(xp: torch.Tensor, hw: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """s0 = h + σ(c0)⊙(tanh(h0) − h), [c0 | h0] = xp + hw, from xp = (x_t ⊙ m_x)·W0x, hw = (h ⊙ m_h)·W0h, h = h_{t−1}"""
    c0, h0 = (xp + hw).split(h.size(-1), -1)
    return highway(h, c0, torch.tanh(h0))


def cell_step(
    xp: torch.Tensor,
    h: torch.Tensor,
    mh: torch.Tensor | None,
    w0h: torch.Tensor | StepProduct,
    waves: list[Wave],
    wave_weights: list[torch.Tensor | StepProduct],
    concat: tuple[int, ...],
) -> torch.Tensor:
    """h_t from xp = (x_t ⊙ m_x)·W0x and h = h_{t-1}: the equations above, for D directions at once.

    xp is (D, B, 2H), h and mh (D, B, H); wave k's weights hold W_i of each edge and direction,
    (E·D, H, 2H).
    """
    D, B, H = h.shape
    states = {0: first_node(xp, times(h if mh is None else h * mh, w0h), h)}
    for wave, w in zip(waves, wave_weights):
        prev = torch.stack([states[j] for j in wave.preds])  # (E, D, B, H)
        inp = prev if mh is None else prev * mh
        c, hh = times(inp.view(-1, B, H), w).view(len(wave.preds), D, B, 2 * H).split(H, -1)
        act = torch.cat([ACTIVATIONS[op](hh[start:stop]) for op, start, stop in wave.runs])
        for node, new in zip(wave.nodes, highway(prev, c, act).unbind(0)):
            states[node] = new if node not in states else states[node] + new
    return torch.stack([states[k] for k in concat]).mean(0)


class FrozenRNN(nn.Module):
    """A genotype's cell as a sequence layer: (T, B, ninp) -> (T, B, directions·nhid).

    With inter-cell gates the hidden state is the tuple (h, x_hist, h_hist), where the histories
    (m, directions, B, ·) hold the last m layer inputs and states, so a language model carries
    them across batches; otherwise it is h (directions, B, nhid). `inter` and `attention` replace
    the genotype's own (the inter-only search wraps a fixed cell in searchable gates).

    `backend` (None: the definition, op by op through autograd) may run the whole time loop
    (`CellBackend.frozen_loop`: on a CPU, the fused Function of `nas.fast.frozen_loop`, without gates and
    outside autocast) or each step (`time_step`: compiled on a GPU); the attention layer after the loop
    stays on autograd. The weights start uniform in
    ±`init_range` (DARTS: 0.04; the tagger's default is ±1/√nhid, `tagger.model.cell_init_range`).
    """

    backend: CellBackend | None = None

    def __init__(
        self,
        genotype: Genotype,
        ninp: int,
        nhid: int,
        directions: int = 1,
        dropout_x: float = 0.0,
        dropout_h: float = 0.0,
        attention_heads: int = 4,
        inter: nn.Module | None = None,
        attention: nn.Module | None = None,
        init_range: float = INIT_RANGE,
    ):
        super().__init__()
        self.genotype, self.ninp, self.nhid, self.directions = genotype, ninp, nhid, directions
        self.dropout_x, self.dropout_h = dropout_x, dropout_h
        steps = genotype.steps
        self.w0 = nn.Parameter(torch.empty(directions, ninp + nhid, 2 * nhid).uniform_(-init_range, init_range))
        self.ws = nn.Parameter(torch.empty(directions, steps, nhid, 2 * nhid).uniform_(-init_range, init_range))
        if inter is None and genotype.inter is not None:
            inter = InterGates.frozen(genotype.inter, ninp, nhid, directions)
        if attention is None and genotype.attention is not None:
            attention = build_attention(genotype.attention, directions * nhid, attention_heads)
        self.inter, self.attention = inter, attention
        self.waves = plan_waves(genotype)
        # The node matrix W_i of every edge in wave order: one gather per forward (one zero-filled
        # gradient of ws in the backward pass), then split into the waves.
        self.register_buffer(
            "_edge_nodes", torch.tensor([i - 1 for wave in self.waves for i in wave.nodes]), persistent=False
        )
        self.backend_state: dict = {}  # what the backend keeps for this layer between calls (plans, packed weights)

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
        batch = PaddedBatch(T, B, lengths, D, x.device)
        hidden = self.init_hidden(B) if hidden is None else batch.sort(hidden)
        h, history = (hidden, None) if self.inter is None else (hidden[0], tuple(hidden[1:]))
        mx = mh = None
        if self.training:  # in the loop's batch order
            mx = variational_mask(x, self.dropout_x, (D, B, self.ninp))
            mh = variational_mask(x, self.dropout_h, (D, B, H))
        backend = self.backend or DEFINITION
        packed = backend.frozen_loop(self, batch, x, h, mx, mh)
        if packed is not None:
            return self._finish(batch, *batch.unpack(packed))
        x = batch.inputs(x)  # (T, D, B, ninp), sorted longest first when lengths differ
        xin = x if mx is None else x * mx
        w0x, w0h, wave_weights = self._loop_weights(backend)
        if self.inter is None:
            xproj = batch.project(xin, w0x)  # x·W0x of every step in one GEMM, before the loop
        else:
            xsteps, w0x = xin.unbind(0), backend.step_weight(w0x)
        one_step = backend.time_step(cell_step, dynamic=True)  # the batch shrinks as sequences end

        def step(t: int, x_gate: torch.Tensor | None, h_in: torch.Tensor) -> torch.Tensor:
            n = h_in.size(1)  # the sequences still going (all, without lengths)
            xp = xproj[t] if x_gate is None else times(xsteps[t][:, :n] * x_gate, w0x)  # x̂_t = x_t ⊙ g′
            return one_step(
                xp, h_in, None if mh is None else mh[:, :n], w0h, self.waves, wave_weights, self.genotype.concat
            )

        out, h, history = run_recurrence(step, h, T, self.inter, x, history, batch.packing)
        return self._finish(batch, out, h if history is None else (h, *history))

    def _finish(self, batch: PaddedBatch, out: torch.Tensor, state):
        """The loop's outputs (T, D, B, H) and last state to the caller's layout, then attention."""
        out, state = batch.outputs(out), batch.unsort(state)
        if self.attention is not None:
            # causal for one direction (the LM); a BiRNN has seen the whole sentence anyway
            out = batch.zero_padding(self.attention(out, causal=self.directions == 1, lengths=batch.lengths))
        return out, state

    def _loop_weights(
        self, backend: CellBackend
    ) -> tuple[torch.Tensor, torch.Tensor | StepProduct, list[torch.Tensor | StepProduct]]:
        """W0x, and the weights the loop multiplies by at every step: W0h and each wave's W_i (E·D, H, 2H),
        as the backend holds them (`step_weight`)."""
        H = self.nhid
        w0x, w0h = self.w0[:, : self.ninp], self.w0[:, self.ninp :]
        per_wave = self.ws[:, self._edge_nodes].split([len(wave.nodes) for wave in self.waves], 1)  # (D, E, H, 2H)
        return (
            w0x,
            backend.step_weight(w0h),
            [backend.step_weight(w.transpose(0, 1).reshape(-1, H, 2 * H)) for w in per_wave],
        )
