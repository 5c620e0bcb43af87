"""The CRF's training loss: flair's `ViterbiLoss`, the same function, with a backward that does
not grow with the square of the sentence length.

flair's loss runs the forward algorithm over a batch's CRF scores (batch × length × tags × tags)
and at each step t reads `features[:running, t]`, a slice. Autograd's backward of each slice is a
zero tensor the size of the whole score tensor with the slice's gradient copied in, then added to
the others: for a batch of 32 sentences of up to 40 tokens and CoNLL-2000's 43 tags, some 40 fills
and adds of 9.5 MB each, the largest single cost of a tagger's training step. Here the scores are
split into steps once (`unbind`, whose backward is one stack) and the sentences that have ended
keep their scores through `torch.where`, so every step reads its own slice of the gradient.

Per sentence the forward algorithm is flair's, term by term (its log-sum-exp, the <START> and
<STOP> transitions, the gold path's score): the loss is the same number, and the gradient the same
up to the order in which floats are summed.
"""
from __future__ import annotations

import torch
from flair.models.sequence_tagger_utils.viterbi import ViterbiLoss
from torch.nn.utils.rnn import pack_padded_sequence


class CRFLoss(ViterbiLoss):
    """flair's `ViterbiLoss` (negative log-likelihood of the gold tag path, summed over the batch)."""

    def forward(self, features_tuple: tuple, targets: torch.Tensor) -> torch.Tensor:
        features, lengths, transitions = features_tuple  # (B, T, K to, K from), lengths, (K to, K from)
        batch, steps = features.shape[:2]
        gold_tags, indices = self._format_targets(targets, lengths)
        indices = torch.tensor(indices, dtype=torch.long, device=features.device).unsqueeze(2)
        at_gold = torch.gather(features.view(batch, steps, -1), 2, indices)
        last_gold = [tags[n - 1] for tags, n in zip(gold_tags, lengths.tolist())]
        gold = (pack_padded_sequence(at_gold, lengths, batch_first=True)[0].sum()
                + transitions[self.stop_tag, last_gold].sum())

        per_step = features.unbind(1)
        running = torch.as_tensor(lengths, device=features.device).unsqueeze(1)  # (B, 1)
        scores = per_step[0][:, :, self.start_tag]  # from <START> to every tag
        for t in range(1, int(running.max())):
            stepped = self._log_sum_exp(per_step[t] + scores.unsqueeze(1), dim=2)
            scores = torch.where(running > t, stepped, scores)
        all_paths = self._log_sum_exp(scores + transitions[self.stop_tag].unsqueeze(0), dim=1).sum()
        return all_paths - gold
