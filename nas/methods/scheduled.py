"""DARTS variants with a setting that moves over the search (β-DARTS's λ, DARTS−'s β, SDARTS's ε).

The method counts the epochs whose batches are done (`after_batches`, before each epoch's
validation) and keeps the count in the checkpoint, so a resumed search moves the setting as an
uninterrupted one does; the schedule is linear from the setting's first-epoch value to its
last-epoch value over `config.epochs` (a resume that raises --epochs stretches what is left).
"""

from __future__ import annotations

import torch.nn as nn

from nas.cells.search_cell import SearchRNN
from nas.methods.architect import LossFn
from nas.methods.base import Scoring
from nas.methods.settings import SearchSettings
from .darts import Darts


def linear(start: float, end: float, epoch: int, epochs: int) -> float:
    """The value in `epoch` (counted from 0) of `epochs`: `start` in the first, `end` in the last, linear in between."""
    return start + (end - start) * epoch / max(epochs - 1, 1)


class ScheduledDarts(Darts):
    records_steps = False  # the moving setting is a Python number, which a replayed CUDA graph would keep fixed

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        """The search cell with a mixing rule of its own (`rules`), on which a method may set its moving
        setting; the class's `rule` stays unchanged, the rule that reads a logged α."""
        rnn = super().layer(config, attention)
        rnn.rule = type(cls.rule)()
        return rnn

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, loss_fn: LossFn):
        self.epoch = 0  # epochs whose batches are done
        super().__init__(config, model, full_epoch, loss_fn=loss_fn)
        self.rules = [m.rule for m in model.modules() if isinstance(m, SearchRNN)]  # the tagger's: one per direction

    def scheduled(self, start: float, end: float) -> float:
        """The setting's value in the epoch now running."""
        return linear(start, end, self.epoch, self.config.epochs)

    def after_batches(self, validation: Scoring) -> None:
        self.epoch += 1

    def state(self) -> dict:
        return {**super().state(), "epoch": self.epoch}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.epoch = state["epoch"]
