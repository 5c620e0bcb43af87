"""The tagger's CRF loss (the negative log-likelihood of the gold path: flair's ViterbiLoss computed
from emissions and transitions) and its decoder (flair's, on the pair scores flair forms)."""

import itertools

import flair
import pytest
import torch
from flair.data import Dictionary, Sentence
from flair.models.sequence_tagger_utils.viterbi import ViterbiDecoder, ViterbiLoss

from tagger.crf import CRFLoss, PairDecoder


@pytest.fixture(autouse=True)
def flair_on_the_cpu(monkeypatch):
    """flair's Viterbi modules make their index tensors on `flair.device`, which flair sets to the GPU wherever
    one exists; these comparisons run on the CPU."""
    monkeypatch.setattr(flair, "device", torch.device("cpu"))


def dictionary(tags: list[str]) -> Dictionary:
    d = Dictionary(add_unk=False)
    for tag in tags + ["<START>", "<STOP>"]:
        d.add_item(tag)
    return d


def chunk_tags() -> Dictionary:
    """CoNLL-2000's size: 41 BIOES tags, <START>, <STOP>."""
    return dictionary([f"{p}-{kind}" for kind in "ABCDEFGHIJ" for p in "BIES"] + ["O"])


def pair_scores(emissions: torch.Tensor, transitions: torch.Tensor) -> torch.Tensor:
    """flair's CRF module: scores[b, t, to, from] = emission[b, t, to] + transitions[to, from]."""
    batch, steps, k = emissions.shape
    return emissions.unsqueeze(-1).expand(batch, steps, k, k) + transitions.unsqueeze(0).unsqueeze(0)


def batch(d: Dictionary, size: int, steps: int, scale: float = 1.0, seed: int = 0):
    """Sentences of every length up to `steps`, longest first as flair's tagger hands them over, with
    flair's −10000 transitions into <START> and out of <STOP>."""
    k = len(d)
    torch.manual_seed(seed)
    lengths = torch.tensor(sorted([steps] + torch.randint(1, steps + 1, (size - 1,)).tolist(), reverse=True))
    emissions, transitions = scale * torch.randn(size, steps, k), torch.randn(k, k)
    transitions[d.get_idx_for_item("<START>"), :] = -10000
    transitions[:, d.get_idx_for_item("<STOP>")] = -10000
    targets = torch.cat([torch.randint(0, k - 2, (n,)) for n in lengths.tolist()])
    return emissions, transitions, lengths, targets


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

    expected = sum(
        torch.logsumexp(torch.stack([path_score(b, p) for p in itertools.product(range(k), repeat=n)]), 0)
        - path_score(b, gold[b])
        for b, n in enumerate(lengths.tolist())
    )
    loss = CRFLoss(d)((emissions, lengths, transitions), torch.tensor(sum(gold, [])))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)


def _loss_and_gradients(loss_function, data, dtype, pairs: bool):
    emissions, transitions, lengths, targets = data
    e, tr = emissions.to(dtype).clone().requires_grad_(), transitions.to(dtype).clone().requires_grad_()
    loss = loss_function((pair_scores(e, tr) if pairs else e, lengths, tr), targets)
    loss.backward()
    return loss.detach(), e.grad, tr.grad


@pytest.mark.parametrize("size, steps, scale", [(32, 40, 1.0), (5, 7, 1.0), (1, 1, 1.0), (8, 12, 60.0), (8, 12, 200.0)])
def test_loss_and_gradients_equal_flairs_viterbi_loss(size, steps, scale):
    """In float64 flair's loss on its pair scores and its gradients for the emissions and transitions;
    in float32 as close to those as flair's own float32 loss is, also with emissions spread over
    hundreds of nats, where sums in exp space reach float32's smallest numbers."""
    d = chunk_tags()
    data = batch(d, size, steps, scale, seed=size)
    exact = _loss_and_gradients(ViterbiLoss(d), data, torch.float64, pairs=True)
    for ours, expected in zip(_loss_and_gradients(CRFLoss(d), data, torch.float64, pairs=False), exact):
        torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-10)
    flair32 = _loss_and_gradients(ViterbiLoss(d), data, torch.float32, pairs=True)
    ours32 = _loss_and_gradients(CRFLoss(d), data, torch.float32, pairs=False)
    assert all(torch.isfinite(x).all() for x in ours32)
    for ours, flairs, expected in zip(ours32, flair32, exact):
        flairs_error = float((flairs.double() - expected).abs().max())
        assert float((ours.double() - expected).abs().max()) <= max(
            5 * flairs_error, 1e-4 * max(1.0, float(expected.abs().max()))
        )


@pytest.mark.parametrize("size, steps, scale, seed", [(6, 9, 1.0, 0), (1, 4, 1.0, 1), (32, 25, 5.0, 2), (7, 1, 1.0, 3)])
def test_decoding_is_flairs_on_the_pair_scores_flair_forms(size, steps, scale, seed):
    """The same tags and the same confidences, to the bit, as flair's decoder on flair's pair scores."""
    d = chunk_tags()
    emissions, transitions, lengths, _ = batch(d, size, steps, scale=scale, seed=seed)
    sentences = [None] * size  # read only for probabilities of every class, off here
    ours = PairDecoder(d).decode((emissions, lengths, transitions), False, sentences)
    flairs = ViterbiDecoder(d).decode((pair_scores(emissions, transitions), lengths, transitions), False, sentences)
    assert ours == flairs
    assert [len(tags) for tags in ours[0]] == lengths.tolist()


def test_decoding_gives_flairs_probabilities_of_every_tag():
    d = dictionary(["B-PER", "I-PER", "O"])
    emissions, transitions, lengths, _ = batch(d, 3, 5, seed=4)
    sentences = [Sentence(["w"] * n) for n in lengths.tolist()]
    ours = PairDecoder(d).decode((emissions, lengths, transitions), True, sentences)
    flairs = ViterbiDecoder(d).decode((pair_scores(emissions, transitions), lengths, transitions), True, sentences)
    assert ours[0] == flairs[0]
    as_tuples = [[[(label.value, label.score) for label in token] for token in sentence] for sentence in ours[1]]
    assert as_tuples == [
        [[(label.value, label.score) for label in token] for token in sentence] for sentence in flairs[1]
    ]
    assert len(as_tuples[0][0]) == len(d)
