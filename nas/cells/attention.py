"""NASABN attention over the recurrent layer's output sequence (Jing et al. 2020; docs/concepts/cell.md).

After the recurrent layer, each output h_t is replaced by an attention read of the sequence,
as in the NASABN reference code (no residual):
    dot:       softmax(h_t·h_s / √C) weighted sum of h_s, no parameters;
    multihead: the same per head on projections q = hWq, k = hWk, v = hWv, then ·Wo (no biases).
The language model attends causally (s ≤ t) within the current chunk (bptt window), like the
NASABN code, which keeps no attention memory across batches; a bidirectional tagger attends over
the whole sentence. In search (`--attention search`) the output is the softmax(α_att)-weighted
mix of both, α_att is an architecture parameter, and the derived type is its argmax.
Choices: the dot scores are scaled by 1/√C (the scaled dot product, for a softmax that does not
saturate at C = 300..850); multi-head uses `heads` heads of ⌈C/heads⌉ dimensions each.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.ops import ATTENTION_TYPES

SEARCH_CHOICES = ("search", *ATTENTION_TYPES, "none")


def attention_mask(steps: int, causal: bool, lengths: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """Boolean mask, True where query t may read key s: s ≤ t if causal, s < length if padded."""
    mask = None
    if causal:
        mask = torch.ones(steps, steps, dtype=torch.bool, device=device).tril()
    if lengths is not None:
        keys = (torch.arange(steps, device=device) < lengths.to(device).unsqueeze(1)).view(-1, 1, 1, steps)
        mask = keys if mask is None else mask & keys
    return mask


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(B, heads, T, d) each -> (B, heads, T, d)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class DotAttention(nn.Module):
    """Parameter-free scaled dot-product self-attention."""

    kind = "dot"

    def forward(self, h: torch.Tensor, causal: bool, lengths: torch.Tensor | None = None) -> torch.Tensor:
        seq = h.transpose(0, 1).unsqueeze(1)  # (B, 1, T, C)
        out = _attend(seq, seq, seq, attention_mask(h.size(0), causal, lengths, h.device))
        return out.squeeze(1).transpose(0, 1)

    def derive(self) -> str:
        return self.kind


class MultiHeadAttention(nn.Module):
    """Masked multi-head self-attention with bias-free projections (4·C·heads·⌈C/heads⌉ parameters)."""

    kind = "multihead"

    def __init__(self, size: int, heads: int = 4):
        super().__init__()
        if heads < 1:
            raise ValueError(f"attention heads must be at least 1, got {heads}")
        self.heads, self.head_size = heads, math.ceil(size / heads)
        inner = heads * self.head_size
        self.qkv = nn.Linear(size, 3 * inner, bias=False)
        self.out = nn.Linear(inner, size, bias=False)

    def forward(self, h: torch.Tensor, causal: bool, lengths: torch.Tensor | None = None) -> torch.Tensor:
        T, B, _ = h.shape
        q, k, v = self.qkv(h).view(T, B, 3, self.heads, self.head_size).permute(2, 1, 3, 0, 4)  # 3 × (B, heads, T, d)
        out = _attend(q, k, v, attention_mask(T, causal, lengths, h.device))
        return self.out(out.permute(2, 0, 1, 3).reshape(T, B, -1))

    def derive(self) -> str:
        return self.kind


def build_attention(kind: str, size: int, heads: int = 4) -> nn.Module:
    """The attention layer a genotype names (`dot` or `multihead`)."""
    if kind == "dot":
        return DotAttention()
    if kind == "multihead":
        return MultiHeadAttention(size, heads)
    raise ValueError(f"unknown attention {kind!r} (one of {', '.join(ATTENTION_TYPES)})")


class SearchAttention(nn.Module):
    """softmax(α_att)-weighted mix of the candidates in `ATTENTION_TYPES` order (NASABN Eq. 3)."""

    def __init__(self, size: int, heads: int = 4):
        super().__init__()
        self.candidates = nn.ModuleList(build_attention(kind, size, heads) for kind in ATTENTION_TYPES)
        self.alpha = nn.Parameter(1e-3 * torch.randn(len(ATTENTION_TYPES)))

    def mixing_weights(self) -> torch.Tensor:
        return F.softmax(self.alpha, dim=-1)

    def forward(self, h: torch.Tensor, causal: bool, lengths: torch.Tensor | None = None) -> torch.Tensor:
        weights = self.mixing_weights()
        return sum(w * att(h, causal, lengths) for w, att in zip(weights, self.candidates))

    def derive(self) -> str:
        """The derived type: argmax of α_att (NASABN Eq. 4)."""
        return ATTENTION_TYPES[int(self.alpha.detach().argmax())]


def search_attention(choice: str, size: int, heads: int = 4) -> nn.Module | None:
    """The attention layer of a search: `--attention search|dot|multihead|none`."""
    if choice == "none":
        return None
    if choice == "search":
        return SearchAttention(size, heads)
    return build_attention(choice, size, heads)
