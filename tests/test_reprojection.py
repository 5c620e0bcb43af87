"""The tagger's reprojection skips the padding's products and gives flair's linear layer's numbers."""

import pytest
import torch
from flair.models import SequenceTagger

from nas.fast.backends import Torch
from tagger import reprojection as reprojection_module
from tagger.reprojection import Reprojection, skipping_padding


def _padded_batch() -> torch.Tensor:
    """3 sentences of 4, 2 and 3 tokens padded with zero vectors to 4, one token zeroed as word dropout zeroes it."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, 6)
    x[1, 2:] = 0  # padding
    x[2, 3:] = 0
    x[0, 1] = 0  # a dropped word
    return x


@pytest.mark.parametrize("rows", [1, 5, 64])  # multiplied: the 8 non-zero rows, 8 + 2 zero rows, all 12
def test_outputs_and_gradients_equal_the_linear_layers(monkeypatch, rows):
    monkeypatch.setattr(reprojection_module, "ROWS", rows)
    torch.manual_seed(1)
    linear = torch.nn.Linear(6, 5)
    reprojection = skipping_padding(linear)
    assert isinstance(reprojection, Reprojection) and reprojection.weight is linear.weight
    x = _padded_batch()
    target = torch.randn(3, 4, 5)
    outputs = []
    for layer in (linear, reprojection):
        out = layer(x)
        grads = torch.autograd.grad((out * target).sum(), [linear.weight, linear.bias])
        outputs.append([out, *grads])
    for a, b in zip(*outputs):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
    assert torch.equal(outputs[1][0][1, 3], linear.bias.detach())  # a padding row is the bias


@pytest.mark.parametrize("rows, multiplied", [(1, 8), (4, 8), (5, 10), (64, 12)])
def test_products_are_formed_for_the_rows_that_are_not_zero_and_a_few_more_so_shapes_repeat(
    monkeypatch, rows, multiplied, gemm_rule
):
    monkeypatch.setattr(reprojection_module, "ROWS", rows)
    layer = skipping_padding(torch.nn.Linear(6, 5))
    seen = []

    class Spy(Torch):  # rows of the product, whichever rule runs it (oneDNN's takes them flat, torch.mm's the shape)
        def projection(self, x, w, b=None):
            seen.append(x.numel() // x.size(-1))
            return super().projection(x, w, b)

    layer.backend = Spy(gemm=gemm_rule)
    layer(_padded_batch())
    assert seen == [multiplied]  # 12 rows, 3 padding, 1 dropped word: 8 not zero


def test_an_input_that_needs_its_gradient_gets_the_plain_product():
    torch.manual_seed(1)
    linear = torch.nn.Linear(6, 5)
    x = _padded_batch().requires_grad_()
    expected = torch.autograd.grad(linear(x).sum(), x)[0]
    torch.testing.assert_close(torch.autograd.grad(skipping_padding(linear)(x).sum(), x)[0], expected)
    assert expected[1, 3].abs().sum() > 0  # a padding row's gradient is not zero


def test_the_tagger_starts_from_flairs_own_weights_and_saves_flairs_keys(tmp_path):
    """With flair's LSTM the tagger is flair's BiLSTM-CRF: the same seed draws the same weights
    (skipping_padding draws none) under the same names."""
    from flair.data import Dictionary
    from flair.embeddings import WordEmbeddings  # noqa: F401  (flair's own embeddings module loads)

    import tagger_data as td
    from tagger.embeddings import build_embeddings
    from tagger.model import CellTagger

    embeddings = build_embeddings(f"glove:{td.write_vectors(tmp_path / 'vectors.txt')}")
    tags = Dictionary(add_unk=False)
    for tag in ("PER", "LOC"):
        tags.add_item(tag)
    tags.span_labels = True
    models = []
    for cls in (SequenceTagger, CellTagger):
        torch.manual_seed(5)
        models.append((cls(embeddings, tags, "ner", hidden_size=8), torch.rand(3)))
    (flair_model, flair_next), (ours, our_next) = models
    assert torch.equal(our_next, flair_next)  # the random numbers a run draws next are flair's too
    assert isinstance(ours.embedding2nn, Reprojection)
    assert list(ours.state_dict()) == list(flair_model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), flair_model.state_dict().values()))


def test_under_autocast_the_padding_rows_get_the_products_dtype():
    torch.manual_seed(1)
    linear = torch.nn.Linear(6, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, out = linear(_padded_batch()), skipping_padding(linear)(_padded_batch())
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)


def test_a_row_holding_nan_is_multiplied_so_the_nan_shows():
    x = _padded_batch()
    x[1, 3, 2] = float("nan")  # in a padding row
    out = skipping_padding(torch.nn.Linear(6, 5))(x)
    assert out[1, 3].isnan().all() and not out[1, 2].isnan().any()
