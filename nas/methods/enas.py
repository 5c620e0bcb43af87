"""ENAS (Pham et al., ICML 2018) on the DARTS search space: a controller samples each batch's cell and learns by
REINFORCE.

An epoch has the paper's two phases (§2.2). First the shared weights train on the epoch's
batches, each on a cell sampled from the controller (`nas.methods.controller`). Then the controller takes
--controller-steps REINFORCE steps with the shared weights fixed, each on a fresh sample whose
reward is c / ppl of the shared model running that cell on the next validation batch
(--batch-size columns, eval mode, the hidden state carried from batch to batch and fresh at each
pass's start, as in both ENAS codes). The epoch's validation and log line are those of the
controller's most likely cell. At the end --candidates cells are sampled from the controller,
each is scored on one validation batch (the first, the same for all), and the best is kept
(§2.2, "Deriving Architectures").

Settings and their sources (the controller's own are in `nas.methods.controller`):
- reward c / ppl with c = 80, the batch's NLL capped at 10 (ENAS code, melodyguan/enas
  src/ptb/ptb_enas_controller.py: 80 / exp(min(loss, 10)); ENAS-pytorch: --reward_c 80); a
  non-finite NLL counts as the cap;
- --controller-steps 2000 per epoch (paper §2.2: "typically set to 2000"; the ENAS code's PTB
  script takes 100 steps of 10 aggregated samples);
- --controller-lr 3.5e-4 for Adam (paper §3.1; ENAS-pytorch); the ENAS code's script uses 1e-3;
- --entropy-weight 1e-4 (paper §3.1; ENAS-pytorch --entropy_coeff); the script uses 1e-3;
- --baseline-decay 0.99 (the ENAS code's --controller_bl_dec, which its PTB script leaves at 0.99;
  the paper gives none);
- --candidates 100 (ENAS-pytorch's --derive_num_sample).
The shared weights train with the settings of every search here (--lr, --clip, ...).
"""

from __future__ import annotations

import math
import statistics

import torch
import torch.nn as nn

from nas.cells.genotype import Genotype
from nas.methods.controller import Controller, Reinforce
from nas.methods.settings import EnasSettings, SearchSettings
from .base import Scoring
from .weight_sharing import WeightSharing

REWARD_C = 80.0
MAX_NLL = 10.0


class Enas(WeightSharing):
    candidate_scoring = "the first batch"
    settings: EnasSettings

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        super().__init__(config, model, full_epoch, **kwargs)
        self.controller = Controller(config.nodes)
        s = self.settings
        self.reinforce = Reinforce(self.controller, s.controller_lr, s.entropy_weight, s.baseline_decay)
        self.summary: dict = {}

    def draw(self) -> Genotype:
        with torch.no_grad():
            return self.controller.sample(self.rng).genotype

    def after_batches(self, validation: Scoring) -> None:
        """The controller's phase; then the controller's most likely cell is the one in use."""
        batches = validation.stream()
        rewards, entropies = [], []
        for _ in range(self.settings.controller_steps):
            sample = self.controller.sample(self.rng)
            self.use(sample.genotype)
            nll = next(batches)
            reward = REWARD_C / math.exp(nll if nll < MAX_NLL else MAX_NLL)  # NaN compares false: the cap
            rewards.append(self.reinforce.step(sample, reward))
            entropies.append(float(sample.entropy))
        greedy = self.controller.greedy()
        self.use(greedy)
        with torch.no_grad():
            greedy_prob = math.exp(float(self.controller.log_prob(greedy)))
        self.summary = {
            "steps": len(rewards),
            "reward": statistics.fmean(rewards) if rewards else None,
            "baseline": self.reinforce.baseline,
            "entropy": statistics.fmean(entropies) if entropies else None,
            "greedy_prob": greedy_prob,
        }

    def record(self, rnn: nn.Module) -> dict:
        """The controller's phase: its mean reward and sample entropy, the baseline, the probability of its most likely
        cell.
        """
        return {"controller": self.summary}

    def candidates(self) -> list[Genotype]:
        with torch.no_grad():
            return [self.controller.sample(self.rng).genotype for _ in range(self.settings.candidates)]

    def score(self, validation: Scoring) -> float:
        return validation.nll(1)

    def state(self) -> dict:
        return {**super().state(), "reinforce": self.reinforce.state_dict()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.reinforce.load_state_dict(state["reinforce"])
