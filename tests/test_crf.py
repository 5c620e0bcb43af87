"""The tagger's CRF loss: the negative log-likelihood of the gold path, as flair's ViterbiLoss computes it."""
import itertools

import pytest
import torch
from flair.data import Dictionary
from flair.models.sequence_tagger_utils.viterbi import ViterbiLoss

from tagger.crf import CRFLoss


def dictionary(tags: list[str]) -> Dictionary:
    d = Dictionary(add_unk=False)
    for tag in tags + ["<START>", "<STOP>"]:
        d.add_item(tag)
    return d


def crf_scores(emissions: torch.Tensor, transitions: torch.Tensor) -> torch.Tensor:
    """flair's CRF module: scores[b, t, to, from] = emission[b, t, to] + transitions[to, from]."""
    batch, steps, k = emissions.shape
    return emissions.unsqueeze(-1).expand(batch, steps, k, k) + transitions.unsqueeze(0).unsqueeze(0)


def test_the_loss_is_minus_the_log_likelihood_of_the_gold_path_over_every_path():
    """Against enumerating every tag sequence of two short sentences by hand (float64)."""
    d = dictionary(["A", "B", "C"])
    start, stop, k = d.get_idx_for_item("<START>"), d.get_idx_for_item("<STOP>"), len(d)
    torch.manual_seed(0)
    emissions, transitions = torch.randn(2, 3, k, dtype=torch.float64), torch.randn(k, k, dtype=torch.float64)
    lengths, gold = torch.tensor([3, 2]), [[0, 2, 1], [1, 1]]

    def path_score(b: int, tags) -> torch.Tensor:
        previous, score = start, torch.zeros((), dtype=torch.float64)
        for t, tag in enumerate(tags):
            score = score + emissions[b, t, tag] + transitions[tag, previous]
            previous = tag
        return score + transitions[stop, previous]

    expected = sum(torch.logsumexp(torch.stack([path_score(b, p) for p in itertools.product(range(k), repeat=n)]), 0)
                   - path_score(b, gold[b]) for b, n in enumerate(lengths.tolist()))
    loss = CRFLoss(d)((crf_scores(emissions, transitions), lengths, transitions), torch.tensor(sum(gold, [])))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)


@pytest.mark.parametrize("batch, steps", [(32, 40), (5, 7), (1, 1)])
def test_loss_and_gradients_equal_flairs_viterbi_loss(batch, steps):
    """The same number as flair's loss and the same gradients for the emissions and the transitions,
    on a batch sorted longest first as flair's tagger hands it over, sentences of every length."""
    d = dictionary([f"{p}-{kind}" for kind in "ABCDEFGHIJ" for p in "BIES"] + ["O"])
    k = len(d)
    torch.manual_seed(batch)
    lengths = torch.tensor(sorted([steps] + torch.randint(1, steps + 1, (batch - 1,)).tolist(), reverse=True))
    emissions, transitions = torch.randn(batch, steps, k), torch.randn(k, k)
    targets = torch.cat([torch.randint(0, k - 2, (n,)) for n in lengths.tolist()])
    results = []
    for loss_function in (ViterbiLoss(d), CRFLoss(d)):
        e, tr = emissions.clone().requires_grad_(), transitions.clone().requires_grad_()
        loss = loss_function((crf_scores(e, tr), lengths, tr), targets)
        loss.backward()
        results.append((loss.detach(), e.grad, tr.grad))
    (flair_loss, flair_de, flair_dt), (loss, de, dt) = results
    torch.testing.assert_close(loss, flair_loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(de, flair_de, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dt, flair_dt, rtol=1e-5, atol=1e-6)
