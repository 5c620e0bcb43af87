"""The α step of the bilevel search (docs/concepts/search-methods.md), kept apart from the weight step as in DARTS,
and `bilevel_step`, the order of one step of the search: α, what the method changes, then the weights.

First order: α ← Adam step on ∇α L_val(w, α).
Second order: with w' = w − η(k·∇w L_train(w) + wd·w),
    ∇α ≈ ∇α L_val(w', α) − η·k · [∇α L_train(w + R·v) − ∇α L_train(w − R·v)] / 2R,
    v = ∇w' L_val(w', α) clipped to norm `weight_clip`, R = 0.01 / ‖v‖,
where k = min(1, weight_clip / ‖∇w L_train‖) is the clipping the weight step applies. The
reference DARTS RNN code clips both the same way (without it, w' at lr 20 diverges on the first
PTB batch at hidden 300); it scales the implicit term by clip/‖∇w‖ even when that exceeds 1,
where we use the coefficient actually applied, min(1, ·).
Every pass here runs through `torch.func.functional_call` with the weights given as tensors, so
the model's own weights are never copied or modified, and with scratch copies of the buffers, so
the α step leaves the BatchNorm statistics alone. Only the gradients each formula needs are
computed: the first-order step asks autograd for ∇α alone, so no weight gradient (the decoder's
10k×emsize included) is ever formed. The second-order step allocates w' once and w ± R·v in one
buffer, shifted in place between the two sides.

The loss is the task's `loss_fn`, which runs the model on the parameters it is handed: the language
model's (`nas.lm.model.language_model_loss`) or the tagger's (`tagger.tagging_search`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol, Sequence, TypeVar

import torch
import torch.nn as nn


Batch = tuple[torch.Tensor, torch.Tensor]  # (words, targets), both (T, B)
# loss_fn(model, parameters and buffers by name, batch, carried hidden state) -> (loss, hidden state to carry on)
LossFn = Callable[[nn.Module, dict[str, torch.Tensor], Any, Any], tuple[torch.Tensor, Any]]
# average(tensors) -> their means over the data-parallel ranks (the tensors themselves on one process)
Average = Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]]
W = TypeVar("W")


def is_arch(name: str) -> bool:
    """Architecture parameters are named `alpha...` wherever they live in the model."""
    return name.rsplit(".", 1)[-1].startswith("alpha")


def split_parameters(model: nn.Module) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    """(weights, α) by name; parameters that do not require grad (frozen embeddings) are neither."""
    weights, arch = {}, {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            (arch if is_arch(name) else weights)[name] = p
    return weights, arch


class Architect:
    def __init__(
        self,
        model: nn.Module,
        lr: float = 3e-3,
        weight_decay: float = 1e-3,
        order: int = 1,
        weight_wd: float = 5e-7,
        arch_names: list[str] | None = None,
        weight_clip: float | None = None,
        *,
        loss_fn: LossFn,
        average: Average,
    ):
        self.model, self.order, self.weight_wd, self.weight_clip = model, order, weight_wd, weight_clip
        self.loss_fn = loss_fn
        self.weights, arch = split_parameters(model)
        self.arch = {n: p for n, p in arch.items() if arch_names is None or n in arch_names}
        self.optimizer = torch.optim.Adam(self.arch.values(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
        self.average = average  # data parallel: every gradient below is the mean over ranks
        self._buffers: dict[str, torch.Tensor] = {}

    def _loss(self, weights: dict[str, torch.Tensor], batch: Batch, hidden) -> tuple[torch.Tensor, object]:
        for name, b in self.model.named_buffers():  # each pass starts from the model's statistics
            if name in self._buffers and self._buffers[name].shape == b.shape:
                self._buffers[name].copy_(b)
            else:
                self._buffers[name] = b.clone()
        return self.loss_fn(self.model, {**weights, **self.arch, **self._buffers}, batch, hidden)

    def step(self, train: Batch, train_hidden, valid: Batch, valid_hidden, eta: float):
        """One α update; returns the validation hidden state to carry to the next batch."""
        arch = list(self.arch.values())
        if self.order == 1:  # weights detached, so that no weight gradient is formed, fused cell included
            loss, valid_hidden = self._loss({n: w.detach() for n, w in self.weights.items()}, valid, valid_hidden)
            grads = self.average(torch.autograd.grad(loss, arch))
        else:
            grads, valid_hidden = self._unrolled_grads(train, train_hidden, valid, valid_hidden, eta)
        for p, g in zip(arch, grads):
            p.grad = g
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return valid_hidden

    def _unrolled_grads(self, train: Batch, train_hidden, valid: Batch, valid_hidden, eta: float):
        names = list(self.weights)
        w = [self.weights[n].detach() for n in names]
        loss, _ = self._loss(self.weights, train, train_hidden)
        gw = self.average(torch.autograd.grad(loss, list(self.weights.values())))
        k = clip_coefficient(gw, self.weight_clip)
        unrolled = list(torch._foreach_mul(w, 1.0 - eta * self.weight_wd))  # w' = w − η(k·∇w + wd·w)
        torch._foreach_add_(unrolled, gw, alpha=-eta * k)
        del gw
        for u in unrolled:
            u.requires_grad_()
        loss, valid_hidden = self._loss(dict(zip(names, unrolled)), valid, valid_hidden)
        grads = self.average(torch.autograd.grad(loss, list(self.arch.values()) + unrolled))
        d_arch, v = grads[: len(self.arch)], list(grads[len(self.arch) :])
        torch._foreach_mul_(v, clip_coefficient(v, self.weight_clip))
        hvp = self.average(self.hessian_vector_product(dict(zip(names, w)), v, train, train_hidden))
        return [da - eta * k * h for da, h in zip(d_arch, hvp)], valid_hidden

    def hessian_vector_product(self, w: dict[str, torch.Tensor], v, train: Batch, hidden) -> list[torch.Tensor]:
        """(∇α L_train(w + R·v) − ∇α L_train(w − R·v)) / 2R with R = 0.01/‖v‖ (finite differences)."""
        r = 0.01 / float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(v))))
        arch = list(self.arch.values())
        device = next(iter(w.values())).device
        shifted = torch._foreach_add(list(w.values()), v, alpha=r)
        sides = []
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            state = _rng_state(device)
            for side in range(2):  # both sides draw the same dropout masks, so only w differs
                if side:
                    torch._foreach_add_(shifted, v, alpha=-2 * r)  # w + R·v → w − R·v in place
                _set_rng_state(device, state)
                loss, _ = self._loss(dict(zip(w, shifted)), train, hidden)
                sides.append(torch.autograd.grad(loss, arch))
        return [(gp - gm) / (2 * r) for gp, gm in zip(*sides)]


def clip_coefficient(grads, max_norm: float | None) -> float:
    """min(1, max_norm / ‖grads‖): the factor gradient clipping to `max_norm` applies (1 with no clipping)."""
    if max_norm is None:
        return 1.0
    norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(grads)))))
    return min(1.0, max_norm / (norm + 1e-6))


def _rng_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


class BilevelMethod(Protocol):
    """What `bilevel_step` asks of a search method (`nas.methods.base.SearchMethod` implements it)."""

    def step_alpha(self, batch: int, train: Any, train_hidden: Any, valid: Any, valid_hidden: Any, eta: float) -> Any:
        """The α step of batch `batch` (one `Architect.step` of its group, or a draw); returns the validation
        hidden state to carry on."""

    def before_weight_step(self) -> None:
        """What the method changes for the weight step that follows (SDARTS-RS perturbs the mixing weights)."""


@dataclass
class Batches:
    """One bilevel step's data: the batch's number in the epoch (which α group steps), the batch the weights
    step on and the batch α steps on, each with the hidden state carried to it (None: none), and the weights'
    learning rate η (which the second-order α step unrolls with)."""

    batch: int
    train: Any
    valid: Any
    lr: float
    train_hidden: Any = None
    valid_hidden: Any = None


def bilevel_step(
    method: BilevelMethod,
    batches: Batches,
    weight_step: Callable[[Any], W],
    alpha_context: Callable[[], ContextManager] = contextlib.nullcontext,
) -> tuple[Any, W]:
    """One step of the bilevel search, in the order every method relies on (DARTS's train_search.py:
    `architect.step`, then the weights' step): the method's α step on `batches.valid`, what it changes for
    the weight step (`before_weight_step`), then `weight_step(batches.train)`, the task's SGD step.
    `alpha_context`: what the α step runs under (the LM search's bf16 autocast). Returns (the validation
    hidden state to carry on, what `weight_step` returned)."""
    b = batches
    with alpha_context():
        valid_hidden = method.step_alpha(b.batch, b.train, b.train_hidden, b.valid, b.valid_hidden, b.lr)
    method.before_weight_step()
    return valid_hidden, weight_step(b.train)
