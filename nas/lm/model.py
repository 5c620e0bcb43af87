"""The recurrent language model, top to bottom: embedding → recurrent layer → tied decoder.

The recurrent layer is a `FrozenRNN` (retraining), a `SearchRNN` (search) or an LSTM baseline;
the model does not care which. Regularisation follows the DARTS/AWD code: embedding-row dropout,
locked (variational) dropout on the layer input and output, variational masks inside the cell.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from nas.cells.backend import DEFINITION, CellBackend
from nas.cells.masks import batch_mask


def embedding_dropout(embed: nn.Embedding, words: torch.Tensor, p: float) -> torch.Tensor:
    """Drop whole rows of the embedding matrix (the same words vanish everywhere in the batch)."""
    weight = embed.weight
    if p > 0:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(words, weight)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """One mask per sequence, shared across time steps: x is (T, B, C)."""
    if not training or p <= 0:
        return x
    return x * batch_mask(x, p, (1, x.size(1), x.size(2)))


class Decoder(nn.Linear):
    """nn.Linear on the run's GEMM rule (`CellBackend.projection`; same parameters and state dict)."""

    backend: CellBackend | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.backend or DEFINITION).projection(x, self.weight, self.bias)


class RNNModel(nn.Module):
    """embedding → recurrent layer → tied decoder. `backend`: the run's (`nas.speed.attach`), which its layers
    and its loss (`lm_loss`) run on; None: the definition."""

    backend: CellBackend | None = None

    def __init__(
        self,
        ntoken: int,
        ninp: int,
        rnn: nn.Module,
        dropout: float = 0.75,
        dropouti: float = 0.2,
        dropoute: float = 0.0,
    ):
        super().__init__()
        if rnn.output_size != ninp:
            raise ValueError(f"tied decoder needs the layer output ({rnn.output_size}) to equal emsize ({ninp})")
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = rnn
        self.decoder = Decoder(ninp, ntoken)  # on oneDNN where the run's GEMM rule puts its products
        self.decoder.weight = self.encoder.weight
        self.dropout, self.dropouti, self.dropoute = dropout, dropouti, dropoute
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def init_hidden(self, batch: int):
        return self.rnn.init_hidden(batch)

    def forward(self, words: torch.Tensor, hidden) -> tuple[torch.Tensor, object, torch.Tensor, torch.Tensor]:
        """words (T, B) → logits (T, B, ntoken), next hidden, raw and dropped layer outputs (for AR/TAR)."""
        emb = embedding_dropout(self.encoder, words, self.dropoute if self.training else 0.0)
        emb = locked_dropout(emb, self.dropouti, self.training)
        raw, hidden = self.rnn(emb, hidden)
        dropped = locked_dropout(raw, self.dropout, self.training)
        return self.decoder(dropped), hidden, raw, dropped


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, backend: CellBackend | None = None) -> torch.Tensor:
    """Mean token negative log-likelihood (nats); perplexity is its exp. `F.cross_entropy`, as the model's
    `backend` runs it (cpu-fused: on C++ kernels where they apply; None: the definition)."""
    return (backend or DEFINITION).cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def language_model_loss(
    model: nn.Module, params: dict[str, torch.Tensor], batch: tuple[torch.Tensor, torch.Tensor], hidden
) -> tuple[torch.Tensor, Any]:
    """The LM's NLL on (words, targets), carrying the hidden state on."""
    logits, hidden, _, _ = functional_call(model, params, (batch[0], hidden))
    return lm_loss(logits, batch[1], model.backend), hidden


def regularised_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    raw: torch.Tensor,
    dropped: torch.Tensor,
    ar: float,
    tar: float,
    backend: CellBackend | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss with AR and TAR added, raw NLL): AR on the dropped outputs, TAR on raw step differences."""
    nll = lm_loss(logits, targets, backend)
    loss = nll
    if ar:
        loss = loss + ar * dropped.pow(2).mean()
    if tar:
        loss = loss + tar * (raw[1:] - raw[:-1]).pow(2).mean()
    return loss, nll


def detach_hidden(hidden):
    if isinstance(hidden, torch.Tensor):
        return hidden.detach()
    return type(hidden)(detach_hidden(h) for h in hidden)
