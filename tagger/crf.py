"""The tagger's CRF: flair's, with its training loss computed from the emissions and transitions.

flair's CRF module adds every transition to every emission, a batch × length × tags × tags tensor
of pair scores, and its `ViterbiLoss` runs the forward algorithm over it: per token position a
log-sum-exp over a batch × tags × tags slice, whose backward in autograd is a zero tensor of the
whole size with the slice's gradient copied in. On CoNLL-2000 (43 tags) that was most of a
word-vector tagger's training step. Here the CRF module hands the emissions on (`EmissionCRF`, the
same `transitions` parameter); the loss (`CRFLoss`) runs the forward algorithm as one
batch × tags by tags × tags product per position in exp space; the decoder (`PairDecoder`) forms
flair's pair scores and decodes them with flair's tensor operations, so prediction is flair's number
for number, without flair's per-token Python.

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
    """flair's Viterbi decoding (`ViterbiDecoder.decode`) of the pair scores flair's CRF module would
    have formed, step for step the same tensor operations, so the same tags and confidences to the
    bit; what flair does per element in Python (each step's running and ending sentences counted over
    the lengths tensor, each token's tag and confidence read with `.item()`) is done once per batch
    on plain lists."""

    def decode(self, features_tuple: tuple, probabilities_for_all_classes: bool, sentences: list):
        emissions, lengths, transitions = features_tuple
        pairs = emissions.unsqueeze(-1) + transitions  # [b, t, to, from] = e[b, t, to] + T[to, from]
        sizes = [int(n) for n in lengths]  # longest first, as flair's tagger sorts a batch
        batch, steps, tags = emissions.shape
        scores = pairs.new_zeros(batch, steps + 1, tags)
        pointers = torch.full((batch, steps + 1, tags), self.stop_tag, dtype=torch.long, device=pairs.device)
        for t in range(steps):
            running = sum(n > t for n in sizes)
            ending = [i for i, n in enumerate(sizes) if n == t + 1]
            if t == 0:
                scores[:running, 0] = pairs[:running, 0, :, self.start_tag]
                pointers[:running, 0] = self.start_tag
            else:
                scores[:running, t], pointers[:running, t] = torch.max(
                    pairs[:running, t] + scores[:running, t - 1].unsqueeze(1), dim=2
                )
            if ending:
                scores[ending, t + 1], pointers[ending, t + 1] = torch.max(
                    scores[ending, t].unsqueeze(1) + transitions[self.stop_tag].unsqueeze(0), dim=2
                )
        decoded = torch.empty((batch, steps + 1), dtype=torch.long, device=pairs.device)
        pointer = torch.full((batch, 1), self.stop_tag, dtype=torch.long, device=pairs.device)
        for t in reversed(range(steps + 1)):  # back along the pointers from <STOP>
            decoded[:, t] = torch.gather(pointers[:, t], 1, pointer).squeeze(1)
            pointer = decoded[:, t].unsqueeze(1)
        decoded = decoded[:, 1:]  # without <START>
        probabilities = torch.softmax(scores[:, :-1], dim=2)
        confidences = probabilities.max(dim=2).values
        item = self.tag_dictionary.get_item_for_index
        found = [
            [(item(tag), confidence) for tag, confidence in zip(path[:n], sure[:n])]
            for path, sure, n in zip(decoded.tolist(), confidences.tolist(), sizes)
        ]
        every = (
            self._all_scores_for_token(probabilities.cpu(), decoded.cpu(), lengths, sentences)
            if probabilities_for_all_classes
            else []
        )
        return found, every


class CRFLoss(ViterbiLoss):
    """flair's `ViterbiLoss` (−log p(gold path), summed over the batch) from emissions and transitions."""

    def forward(self, features_tuple: tuple, targets: torch.Tensor) -> torch.Tensor:
        emissions, lengths, transitions = features_tuple  # (B, T, K), lengths, (K to, K from)
        lengths = torch.as_tensor(lengths, device=emissions.device)
        return self.log_partition(emissions, lengths, transitions) - self.gold_score(
            emissions, lengths, transitions, targets.to(emissions.device)
        )

    def gold_score(
        self, emissions: torch.Tensor, lengths: torch.Tensor, transitions: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
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
