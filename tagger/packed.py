"""flair's packed batch as the padded (T, B, ·) batch the cells run on.

flair hands its recurrent layer a `PackedSequence`. torch's `pad_packed_sequence` pads it by copying
one time step's slice at a time into the padded tensor, and autograd differentiates each of those
in-place copies by cloning the whole padded gradient: T clones of a T × B × width tensor per batch,
at a pooled-Flair tagger's width (1,074) the largest copies of its training step. `padded` places
every packed row with one `index_copy`, whose gradient is one `index_select`: the same tensor and
lengths, the same gradient.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import PackedSequence


def padded(packed: PackedSequence) -> tuple[torch.Tensor, torch.Tensor]:
    """`pad_packed_sequence(packed)`: the padded (T, B, ·) batch in the caller's order, zero past
    each length, and the lengths (B,) on the CPU."""
    sizes = packed.batch_sizes  # per step, the sequences still going (a CPU tensor)
    steps, batch = len(sizes), int(sizes[0])
    step = torch.repeat_interleave(torch.arange(steps), sizes)  # each packed row's time step
    within = torch.arange(len(step)) - torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    column = within if packed.sorted_indices is None else packed.sorted_indices.cpu()[within]
    rows = (step * batch + column).to(packed.data.device)
    data = packed.data
    out = data.new_zeros(steps * batch, *data.shape[1:]).index_copy(0, rows, data)
    return out.view(steps, batch, *data.shape[1:]), torch.bincount(column, minlength=batch)
