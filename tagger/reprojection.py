"""The tagger's reprojection of the embeddings (flair's `embedding2nn`), without products for padding.

flair pads a batch to its longest sentence with zero vectors and reprojects the padded tensor, so a
batch of 32 sentences whose longest has 42 tokens multiplies 1,344 rows where some 750 are tokens;
with pooled Flair embeddings (1,074 wide) that product and its weight gradient are the largest
products of a training step. A zero row's output is the bias, whatever the weight, and adds
nothing to the weight's gradient; so here the rows that are not all zero are multiplied and every
other row gets the bias. The outputs are the same numbers (a token whose vector word dropout
zeroed is such a row too, and also gets the bias), the weight and bias the same gradients up to the
order floats are summed in. Its products run on the run's backend (`CellBackend.projection`), on oneDNN
where the run's GEMM rule puts their shape there (about twice MKL's speed where oneDNN runs AVX-512 at
full width), as the recurrent layer's own do.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from nas.cells.backend import DEFINITION, CellBackend

# Rows multiplied are a multiple of this: oneDNN keeps a primitive (with its own copy of the weight)
# for every product shape it has run, so a row count that changed from batch to batch kept one per batch.
ROWS = 64


class Reprojection(nn.Linear):
    """`nn.Linear` that multiplies only the rows of its input that are not all zero (and as many zero
    rows as make their count a multiple of `ROWS`), its products on `backend`'s GEMM rule (`nas.speed.attach`).

    An input that needs a gradient (fine-tuned embeddings) runs the plain product, whose gradient for
    the zero rows is not zero."""

    backend: CellBackend | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linear = (self.backend or DEFINITION).projection
        if x.requires_grad or x.dim() < 2:
            return linear(x, self.weight, self.bias)
        flat = x.reshape(-1, x.size(-1))
        kept = flat.abs().amax(dim=1) != 0  # twice as fast as any(); NaN rows kept
        rows = kept.nonzero().squeeze(1)
        if rows.numel() % ROWS:  # a few zero rows more (their products are the bias too), so shapes repeat
            rows = torch.cat([rows, (~kept).nonzero().squeeze(1)[: ROWS - rows.numel() % ROWS]])
        if rows.numel() == flat.size(0):
            return linear(x, self.weight, self.bias)
        products = linear(flat.index_select(0, rows), self.weight, self.bias)
        bias = products.new_zeros(()) if self.bias is None else self.bias.to(products.dtype)  # autocast: bf16 products
        out = bias.expand(flat.size(0), self.out_features)
        return out.index_copy(0, rows, products).view(*x.shape[:-1], self.out_features)


def skipping_padding(linear: nn.Linear) -> Reprojection:
    """A `Reprojection` holding `linear`'s own parameters (no new weights drawn, no random numbers used).

    Built without `nn.Linear.__init__` (which would draw weights) rather than with
    `nn.utils.skip_init`, whose meta-device tensors made torch import its symbolic-shapes machinery
    (0.3 s of every tagger's construction and load)."""
    reprojection = Reprojection.__new__(Reprojection)
    nn.Module.__init__(reprojection)
    reprojection.in_features, reprojection.out_features = linear.in_features, linear.out_features
    reprojection.register_parameter("weight", linear.weight)
    reprojection.register_parameter("bias", linear.bias)
    return reprojection
