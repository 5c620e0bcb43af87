"""Random search with weight sharing (Li & Talwalkar, UAI 2019), on the DARTS search space.

Each batch trains the shared weights on one architecture drawn uniformly from the space the
search derives from (`nas.methods.sampling.sample`: per node one op of identity, tanh, relu, sigmoid and
one predecessor), as their PTB code does (searchers/random_weight_share.py with
benchmarks/ptb/darts/darts_wrapper_discrete.py in liamcli/randomNAS_release). At the end,
--candidates fresh uniform draws are each scored on the whole validation split (in --batch-size
columns, at most --eval-batches batches) with the shared weights, and the best is kept. Li &
Talwalkar score 1000 draws per round on the full validation set; the default here is 100, a
tenth of that, since each costs a pass over the validation split (minutes for all of them on a
CPU at the PTB sizes) and the ranking among 100 already shows how the found cell compares with
its peers. At each epoch end a fixed panel of --track-candidates draws (drawn once, from a
generator of its own, so the batches' draws are those of a search without it) is scored the
same way; the log line records the best of them and its perplexity, which the convergence rule
follows, and the epoch's validation is that candidate's: there is no learned architecture to show.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn as nn

from nas.cells.genotype import Genotype
from nas.common.stats import ppl
from nas.methods.sampling import sample
from nas.methods.settings import RandomSearchSettings, SearchSettings
from .base import Scoring
from .weight_sharing import WeightSharing


class RandomSearch(WeightSharing):
    candidate_scoring = "at most --eval-batches batches"
    settings: RandomSearchSettings

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        super().__init__(config, model, full_epoch, **kwargs)
        panel_rng = torch.Generator().manual_seed(config.seed + 1)
        self.panel = [sample(self.space, panel_rng) for _ in range(self.settings.track_candidates)]
        self.summary: dict = {}

    def after_batches(self, validation: Scoring) -> None:
        """Score the panel; its best candidate is the one in use for the epoch's validation."""
        scored = [ppl(nll) for nll in self.score_all(self.panel, validation)]
        best = min(range(len(scored)), key=scored.__getitem__)
        self.use(self.panel[best])
        self.summary = {
            "best_candidate": self.panel[best].to_dict()["nodes"],
            "best_candidate_ppl": scored[best],
            "panel_median_ppl": statistics.median(scored),
        }

    def record(self, rnn: nn.Module) -> dict:
        """The panel's best candidate and its perplexity, and the panel's median."""
        return dict(self.summary)

    def draw(self) -> Genotype:
        return sample(self.space, self.rng)

    def candidates(self) -> list[Genotype]:
        return [sample(self.space, self.rng) for _ in range(self.settings.candidates)]

    def score(self, validation: Scoring) -> float:
        return validation.nll(self.config.eval_batches)
