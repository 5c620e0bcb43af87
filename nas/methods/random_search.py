"""Random search with weight sharing (Li & Talwalkar, UAI 2019), on the DARTS search space.

Each batch trains the shared weights on one architecture drawn uniformly from the space the
search derives from (`nas.sampling.sample`: per node one op of identity, tanh, relu, sigmoid and
one predecessor), as their PTB code does (searchers/random_weight_share.py with
benchmarks/ptb/darts/darts_wrapper_discrete.py in liamcli/randomNAS_release). At the end,
--candidates fresh uniform draws are each scored on the whole validation split (in --batch-size
columns, at most --eval-batches batches) with the shared weights, and the best is kept. Li &
Talwalkar score 1000 draws per round on the full validation set; the default here is 100, a
tenth of that, since each costs a pass over the validation split (minutes for all of them on a
CPU at the PTB sizes) and the ranking among 100 already shows how the found cell compares with
its peers. The epoch's log line shows the architecture of the epoch's last batch: there is no
learned architecture to show.
"""
from __future__ import annotations

from ..genotype import Genotype
from ..sampling import sample
from .base import Validation
from .weight_sharing import WeightSharing


class RandomSearch(WeightSharing):
    candidate_scoring = "validation split in --batch-size columns, fresh hidden state, at most --eval-batches batches"

    def draw(self) -> Genotype:
        return sample(self.space, self.rng)

    def candidates(self) -> list[Genotype]:
        return [sample(self.space, self.rng) for _ in range(self.config.candidates)]

    def score(self, validation: Validation) -> float:
        return validation.nll(self.config.eval_batches)
