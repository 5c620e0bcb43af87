"""Language-model evaluation: token losses and perplexity over batchified data (search, retraining, eval-lm)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from nas.lm.model import RNNModel


def get_batch(source: torch.Tensor, i: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(words, next words) of the `seq_len` steps from row `i` of batchified data, shorter at its end."""
    seq_len = min(seq_len, source.size(0) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len]


@torch.no_grad()
def token_losses(
    model: RNNModel,
    data: torch.Tensor,
    bptt: int,
    max_batches: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    graphs: Callable | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(target ids, their NLL) over `data` (steps, batch), flattened; hidden carried across chunks; eval mode.
    `on_chunk(steps)`: after each chunk, the steps done so far (a caller's progress). `graphs`: each
    chunk replayed as a recorded CUDA graph (the backend's `step_graphs`; on a GPU the chunks are launch-bound)."""
    was_training = model.training
    model.eval()
    hidden = model.init_hidden(data.size(1))
    targets_seen, losses = [], []

    def chunk(words: torch.Tensor, targets: torch.Tensor, hidden) -> tuple[torch.Tensor, object]:
        logits, hidden, _, _ = model(words, hidden)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction="none"), hidden

    for k, i in enumerate(range(0, data.size(0) - 1, bptt)):
        if max_batches is not None and k >= max_batches:
            break
        words, targets = get_batch(data, i, bptt)
        if graphs is None:
            loss, hidden = chunk(words, targets, hidden)
        else:
            loss, hidden = graphs("eval", chunk, words, targets, hidden)
            loss = loss.clone()  # the recording's output is overwritten by the next chunk
        losses.append(loss)
        targets_seen.append(targets.reshape(-1))
        if on_chunk is not None:
            on_chunk(i + words.size(0))
    model.train(was_training)
    return torch.cat(targets_seen), torch.cat(losses)


def evaluate(
    model: RNNModel,
    data: torch.Tensor,
    bptt: int,
    max_batches: int | None = None,
    on_chunk: Callable[[int], None] | None = None,
    graphs: Callable | None = None,
) -> float:
    """Mean token NLL over `data` (steps, batch), hidden carried across chunks; eval mode."""
    return float(token_losses(model, data, bptt, max_batches, on_chunk, graphs)[1].double().mean())
