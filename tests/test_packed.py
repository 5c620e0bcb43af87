"""`tagger.packed.padded` is torch's `pad_packed_sequence`: the same padded batch, lengths and gradient."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from tagger.packed import padded


@pytest.mark.parametrize("enforce_sorted", [False, True])
def test_padding_a_packed_batch_gives_torchs_batch_lengths_and_gradient(enforce_sorted):
    torch.manual_seed(0)
    lengths = torch.tensor([5, 5, 3, 1]) if enforce_sorted else torch.tensor([3, 5, 1, 5])  # ties, and a 1
    x = torch.randn(4, 5, 7, dtype=torch.float64, requires_grad=True)  # batch first, as flair packs it
    grad = torch.randn(5, 4, 7, dtype=torch.float64)

    ours, our_lengths = padded(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=enforce_sorted))
    (our_grad,) = torch.autograd.grad((ours * grad).sum(), x)
    torchs, torch_lengths = pad_packed_sequence(
        pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=enforce_sorted)
    )
    (torch_grad,) = torch.autograd.grad((torchs * grad).sum(), x)

    assert torch.equal(ours, torchs) and torch.equal(our_lengths, torch_lengths)
    assert torch.equal(our_grad, torch_grad)
    for i, n in enumerate(lengths.tolist()):  # the sentence, then zeros
        assert torch.equal(ours[:n, i], x[i, :n]) and torch.all(ours[n:, i] == 0)
