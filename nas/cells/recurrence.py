"""The time loop both cells run (`run_recurrence`), and how a padded batch is laid out for it.

A cell only says what one step computes (`nas.cells.cell`, `nas.cells.search_cell`). Everything about
sequences sits here: the loop over time with the ESS inter-cell gates (`nas.cells.gates`), and for the
frozen cell a padded batch of sentences of different lengths (`PaddedBatch`): sorted longest
first and run as a packed sequence (at step t only the sequences still going, a prefix of the
batch), with a second direction that reads each sentence reversed within its length.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn as nn

Step = Callable[[int, "torch.Tensor | None", torch.Tensor], torch.Tensor]


class Packing(NamedTuple):
    """A padded (T, B) batch sorted longest first, laid out step after step as a packed sequence.

    Packed tensors hold the rows of step 0, then those of step 1, ...; batch at dim −2.
    """

    lengths: torch.Tensor  # (B,)
    counts: list[int]  # per step, the sequences still going (a prefix of the batch)
    rows: torch.Tensor  # each packed row's index t·B + b in the padded (T, B) layout
    last: torch.Tensor  # (B,) the packed row of each sequence's last step

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Packed rows (..., rows, C) -> padded (T, ..., B, C), zero past each length."""
        steps, batch = len(self.counts), self.lengths.numel()
        out = packed.new_zeros(*packed.shape[:-2], steps * batch, packed.size(-1)).index_copy(-2, self.rows, packed)
        return out.view(*packed.shape[:-2], steps, batch, -1).movedim(-3, 0)

    def last_rows(self, packed: torch.Tensor) -> torch.Tensor:
        """Each sequence's row at its last step: (..., rows, C) -> (..., B, C)."""
        return packed.index_select(-2, self.last)


def pack_batch(lengths: torch.Tensor, steps: int) -> Packing:
    """The `Packing` of a batch whose `lengths` (at least 1) are sorted longest first."""
    real = torch.arange(steps, device=lengths.device).unsqueeze(1) < lengths  # (T, B)
    counts = real.sum(1)
    offsets = torch.cumsum(counts, 0) - counts  # first packed row of each step
    last = offsets[lengths - 1] + torch.arange(lengths.numel(), device=lengths.device)
    return Packing(lengths, counts.tolist(), real.view(-1).nonzero().squeeze(1), last)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence of a (T, B, ...) padded batch within its own length; padding stays put."""
    steps = torch.arange(x.size(0), device=x.device).unsqueeze(1)
    lengths = lengths.to(x.device).unsqueeze(0)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return x.gather(0, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


def batch_take(state, index: torch.Tensor):
    """A hidden state (a tensor or a tuple of them, batch at dim −2) with its batch rows reordered."""
    if isinstance(state, torch.Tensor):
        return state.index_select(-2, index)
    return tuple(batch_take(part, index) for part in state)


class PaddedBatch:
    """A padded batch x (T, B, ·) of one or two directions, as `run_recurrence` runs it.

    `inputs` and `sort` take the caller's layout to the loop's: directions stacked at dim 1 (the
    second reversed within each length) and, when the lengths differ, the batch sorted longest
    first with the loop's `packing`. `outputs` and `unsort` take the loop's results back.
    """

    def __init__(self, steps: int, batch: int, lengths: torch.Tensor | None, directions: int, device: torch.device):
        self.steps, self.batch, self.directions = steps, batch, directions
        self.lengths = self.order = self.restore = self.packing = None  # set when some sequence is shorter than T
        if lengths is not None and bool((lengths < steps).any()):
            lengths = lengths.to(device)
            if int(lengths.min()) < 1:
                raise ValueError("FrozenRNN: every sequence needs at least one step")
            self.lengths = lengths
            self.order = torch.argsort(lengths, descending=True, stable=True)
            self.restore = torch.argsort(self.order)
            self.packing = pack_batch(lengths[self.order], steps)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """(T, B, ·) -> (T, D, B, ·), sorted."""
        if self.order is not None:
            x = x[:, self.order]
        return torch.stack([x, self._reverse(x)], 1) if self.directions == 2 else x.unsqueeze(1)

    def sort(self, state):
        """A hidden state of the caller's batch (or None) in the loop's batch order."""
        return state if self.order is None or state is None else batch_take(state, self.order)

    @property
    def counts(self) -> list[int]:
        """Per step, the sequences still going."""
        return [self.batch] * self.steps if self.packing is None else self.packing.counts

    def packed_inputs(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The caller's x (T, B, K) as the loop's packed rows (D, rows, K): each direction's real positions,
        step after step, in one gather, times a per-sequence mask (D, B, K) in the loop's order."""
        T, B, K = x.shape
        D = self.directions
        if D == 1 and self.packing is None:
            return x.reshape(1, T * B, K) if mask is None else (x * mask).reshape(1, T * B, K)
        rows = self.packing.rows if self.packing is not None else torch.arange(T * B, device=x.device)
        t, b = rows // B, rows % B  # b in the loop's order
        column = b if self.order is None else self.order[b]
        sources = [t * B + column]
        if D == 2:
            lengths = self.packing.lengths[b] if self.packing is not None else T
            sources.append((lengths - 1 - t) * B + column)
        packed = x.reshape(T * B, K).index_select(0, torch.cat(sources)).view(D, -1, K)
        return packed if mask is None else packed * mask.index_select(1, b)

    def unpack(self, packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`packed` rows (D, rows, H) -> the padded (T, D, B, H), zero past each length, and each last row (D, B, H)."""
        if self.packing is None:
            return packed.view(packed.size(0), self.steps, self.batch, -1).movedim(1, 0), packed[:, -self.batch :]
        return self.packing.unpack(packed), self.packing.last_rows(packed)

    def project(self, x: torch.Tensor, weight: torch.Tensor) -> list[torch.Tensor] | tuple[torch.Tensor, ...]:
        """x_t·W of every step in one batched GEMM over the real positions only: x (T, D, B, K), W (D, K, N).

        Per step t, (D, n_t, N) for the n_t sequences still going (padding would cost as much as
        the sentences); the steps are split, not indexed, so the backward pass stacks their
        gradients once instead of zero-filling a whole (T, D, B, N) tensor per step.
        """
        T, D, B, K = x.shape
        flat = x.transpose(0, 1).reshape(D, T * B, K)
        if self.packing is None:
            return torch.bmm(flat, weight).view(D, T, B, -1).unbind(1)
        return torch.bmm(flat[:, self.packing.rows], weight).split(self.packing.counts, 1)

    def outputs(self, out: torch.Tensor) -> torch.Tensor:
        """The loop's (T, D, B, H) -> (T, B, D·H) in the caller's order, both directions in sentence order."""
        out = torch.cat([out[:, 0], self._reverse(out[:, 1])], -1) if self.directions == 2 else out[:, 0]
        return out if self.order is None else out[:, self.restore]

    def unsort(self, state):
        """A hidden state of the loop back in the caller's batch order."""
        return state if self.order is None else batch_take(state, self.restore)

    def zero_padding(self, out: torch.Tensor) -> torch.Tensor:
        """(T, B, ·) in the caller's order with every position past a length set to zero."""
        if self.lengths is None:
            return out
        return out * (torch.arange(self.steps, device=out.device).unsqueeze(1) < self.lengths).unsqueeze(-1)

    def _reverse(self, x: torch.Tensor) -> torch.Tensor:
        """Each sequence of the sorted (T, B, ·) batch reversed within its length."""
        return x.flip(0) if self.packing is None else reverse_padded(x, self.packing.lengths)


def input_gate(
    gates: nn.Module, x: torch.Tensor, x_hist: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """f′(x_{t-m..t-1}) for every step t < `steps` (it reads inputs only, so all at once), and
    x_{-m}..x_{T-1}: the zero (or carried) past `x_hist` (most recent first), then x."""
    m = x_hist.size(0)
    xs = torch.cat([x_hist.flip(0), x])
    return gates.f(torch.stack([xs[m - i : m - i + steps] for i in range(1, m + 1)])), xs  # [i-1][t] = x_{t-i}


def run_recurrence(
    step: Step,
    h: torch.Tensor,
    steps: int,
    gates: nn.Module | None = None,
    x: torch.Tensor | None = None,
    history: tuple[torch.Tensor, torch.Tensor] | None = None,
    packing: Packing | None = None,
) -> tuple[torch.Tensor, torch.Tensor, tuple | None]:
    """The time loop every recurrent layer shares: h_t = step(t, x_gate, h_in) for t < steps.

    Without gates, x_gate is None and h_in = h_{t-1}. With ESS gates (`nas.cells.gates`), over x
    (T, ..., ninp) and the carried `history` (x_hist, h_hist), each (m, ..., ·) most recent first
    and zero at a sequence start:
        h_in = h_{t-1} ⊙ f′(x_{t-m..t-1})   (inputs only: computed for every t before the loop)
        x_gate = g′(h_{t-m..t-1})           (the step scales x_t by it)
    so the output at t never depends on inputs after t.

    With a `packing` of a padded batch (batch at dim −2 everywhere), step t runs only the
    sequences still going: h_in has `packing.counts[t]` rows, a prefix of the batch, and `step`
    takes its inputs for that many. The outputs are zero past each length, and the last h and
    history are each sequence's own. Returns (outputs (T, ...), last h, history).
    """
    B = h.size(-2)
    counts = [B] * steps if packing is None else packing.counts
    outputs, histories = [], []
    if gates is not None:
        x_hist, h_hist = history
        m = x_hist.size(0)
        f_all, xs = input_gate(gates, x, x_hist, steps)
        f_gate = f_all.unbind(0)
        g_gate = gates.g.stepwise()
    for t, n in enumerate(counts):
        if n == 0:  # padding past the longest sequence: nothing left to run
            break
        if n < h.size(-2):  # the sequences that ended drop out
            h = h[..., :n, :]
            h_hist = h_hist[..., :n, :] if gates is not None else None
        if gates is None:
            h = step(t, None, h)
        else:
            f = f_gate[t] if n == B else f_gate[t][..., :n, :]
            h = step(t, g_gate(h_hist), h * f)
            h_hist = torch.cat([h.unsqueeze(0), h_hist[:-1]])
            histories.append(h_hist)
        outputs.append(h)
    if packing is None:
        out = torch.stack(outputs)
    else:  # outputs and histories are packed, step after step
        packed = torch.cat(outputs, -2)
        out, h = packing.unpack(packed), packing.last_rows(packed)
        if gates is not None:
            h_hist = packing.last_rows(torch.cat(histories, -2))
    if gates is None:
        return out, h, None
    return out, h, (input_history(xs, m, packing), h_hist)


def input_history(xs: torch.Tensor, m: int, packing: Packing | None = None) -> torch.Tensor:
    """The inputs a gated layer carries to its next batch, from xs = x_{-m}..x_{T-1} (`input_gate`): each
    sequence's last m inputs (before its length, with a `packing`), most recent first."""
    if packing is None:
        return xs.flip(0)[:m]
    ends = packing.lengths.view(*[1] * (xs.dim() - 3), -1, 1)  # broadcast over the batch dim −2
    index = m + ends.unsqueeze(0) - torch.arange(1, m + 1, device=xs.device).view(-1, *[1] * ends.dim())
    return xs.gather(0, index.expand(m, *xs.shape[1:]))
