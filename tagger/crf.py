"""The tagger's CRF: flair's, with its training loss computed from the emissions and transitions.

flair's CRF module adds every transition to every emission, a batch × length × tags × tags tensor
of pair scores, and its `ViterbiLoss` runs the forward algorithm over it: per token position a
log-sum-exp over a batch × tags × tags slice, whose backward in autograd is a zero tensor of the
whole size with the slice's gradient copied in. On CoNLL-2000 (43 tags) that was most of a
word-vector tagger's training step. Here the CRF module hands the emissions on (`EmissionCRF`, the
same `transitions` parameter); the loss (`CRFLoss`) runs the forward algorithm as one
batch × tags by tags × tags product per position in exp space; the decoder (`PairDecoder`) forms
flair's pair scores and decodes as flair does, so prediction is flair's number for number.

The loss is flair's function, the negative log-likelihood of the gold path summed over the batch:

    s_1(i) = e_1(i) + T(i, <START>),  s_t(i) = e_t(i) + log Σ_j exp(s_{t-1}(j) + T(i, j)),
    log Z = log Σ_i exp(s_n(i) + T(<STOP>, i)),   loss = Σ_sentences log Z − score(gold path),

with log Σ_j exp(s(j) + T(i, j)) = m + log Σ_j exp(s(j) + d_j − m)·exp(T(i, j) − d_j), where d_j
is the best transition out of tag j and m the largest s(j) + d_j: both factors are at most 1, and
the sums are taken in float64, whose exp() reaches e⁻⁷⁰⁸ where float32's stops at e⁻⁸⁷. A sum
below even that (flair's −10000 transitions into <START> make <START> such a tag at every step) is
held at the smallest float64, which puts that tag 708 nats below the best instead of lower, and
keeps infinities out of the gradients. In float64 throughout the loss and its gradients equal
flair's to 1e-13 (tests/test_crf.py); in float32 they differ in the last bits, by about as much as
flair's own float32 loss differs from its float64 one.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from flair.models.sequence_tagger_utils.viterbi import ViterbiDecoder, ViterbiLoss
from torch.nn.utils.rnn import pad_sequence


class EmissionCRF(nn.Module):
    """flair's CRF module (its `transitions[to, from]`, saved as `crf.transitions`), handing the
    emissions (batch × length × tags) on instead of adding every transition to every emission."""

    def __init__(self, transitions: nn.Parameter):
        super().__init__()
        self.transitions = transitions

    def forward(self, emissions: torch.Tensor) -> torch.Tensor:
        return emissions


class PairDecoder(ViterbiDecoder):
    """flair's Viterbi decoder, given the pair scores flair's CRF module would have formed."""

    def decode(self, features_tuple: tuple, probabilities_for_all_classes: bool, sentences: list):
        emissions, lengths, transitions = features_tuple
        pairs = emissions.unsqueeze(-1) + transitions  # [b, t, to, from] = e[b, t, to] + T[to, from]
        return super().decode((pairs, lengths, transitions), probabilities_for_all_classes, sentences)


class CRFLoss(ViterbiLoss):
    """flair's `ViterbiLoss` (−log p(gold path), summed over the batch) from emissions and transitions."""

    def forward(self, features_tuple: tuple, targets: torch.Tensor) -> torch.Tensor:
        emissions, lengths, transitions = features_tuple  # (B, T, K), lengths, (K to, K from)
        lengths = torch.as_tensor(lengths, device=emissions.device)
        return (self.log_partition(emissions, lengths, transitions)
                - self.gold_score(emissions, lengths, transitions, targets.to(emissions.device)))

    def gold_score(self, emissions: torch.Tensor, lengths: torch.Tensor, transitions: torch.Tensor,
                   targets: torch.Tensor) -> torch.Tensor:
        """Σ over sentences and tokens of e_t(y_t) + T(y_t, y_{t−1}) from <START>, plus T(<STOP>, y_n);
        `targets` are the gold tags of the sentences one after another."""
        batch, steps = emissions.shape[:2]
        tags = pad_sequence(torch.split(targets, lengths.tolist()), batch_first=True, padding_value=self.stop_tag)
        tags = nn.functional.pad(tags, (0, steps - tags.size(1)), value=self.stop_tag)
        previous = torch.cat([torch.full_like(tags[:, :1], self.start_tag), tags[:, :-1]], dim=1)
        per_token = emissions.gather(2, tags.unsqueeze(2)).squeeze(2) + transitions[tags, previous]
        inside = torch.arange(steps, device=emissions.device) < lengths.unsqueeze(1)
        last = tags[torch.arange(batch, device=emissions.device), lengths - 1]
        return per_token[inside].sum() + transitions[self.stop_tag, last].sum()

    def log_partition(self, emissions: torch.Tensor, lengths: torch.Tensor, transitions: torch.Tensor) -> torch.Tensor:
        """Σ over sentences of log Z: the forward algorithm as products in exp space (module docstring)."""
        running = lengths.unsqueeze(1)
        best_out = transitions.detach().amax(dim=0)  # d_j; any constant is exact, this one keeps exp() ≤ 1
        weights = (transitions - best_out).double().exp().t()  # [from, to]
        tiny = torch.finfo(torch.float64).tiny
        per_step = emissions.unbind(1)  # one backward node (a stack), not a zero-filled copy per step
        scores = per_step[0] + transitions[:, self.start_tag]
        for t in range(1, int(running.max())):
            reach = scores + best_out
            top = reach.detach().amax(dim=1, keepdim=True)  # m
            sums = ((reach - top).double().exp() @ weights).clamp_min(tiny)
            scores = torch.where(running > t, per_step[t] + top + sums.log().to(scores.dtype), scores)
        return torch.logsumexp(scores + transitions[self.stop_tag], dim=1).sum()
