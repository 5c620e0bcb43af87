"""Weight-sharing candidates (random search, ENAS) scored on several Ray workers at once.

Scoring a candidate is a pass over validation data with the shared weights and nothing else, so
the candidates split into independent shares: each worker rebuilds the search model from its
settings and the weights of the moment, scores its share in turn as the search process would
(`WeightSharing.score_all`), and the scores come back in the candidates' order, the same numbers
(each worker runs the search's own thread count); the model and the data go to Ray's object
store once per scoring. The Ray instance is started at the first
scoring (`nas.common.grid`) and kept for the next ones (a random search scores its panel every
epoch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from nas.cells.genotype import Genotype
from nas.common.errors import InputError
from nas.common.grid import check_workers, map_on_ray
from nas.runs.search_model import build_search_model
from nas.methods import method_class, search_settings
from nas.methods.weight_sharing import WeightSharing
from nas.runs.config import SearchConfig
from nas.runs.search import Validation
from nas.lm.model import language_model_loss


@dataclass
class SharedModel:
    """What every worker needs: the search model's settings and weights, and the validation data."""

    config: SearchConfig
    ntoken: int
    weights: dict[str, torch.Tensor]
    columns: torch.Tensor
    split: torch.Tensor
    threads: int


def score_share(shared: SharedModel, genotypes: list[Genotype]) -> list[float]:
    """The validation NLL of each of `genotypes`, as `WeightSharing.score_all` gives it."""
    torch.set_num_threads(shared.threads)
    c = shared.config
    model = build_search_model(c, shared.ntoken)
    model.load_state_dict(shared.weights)
    method = method_class(c.method)(search_settings(c), model, 1, loss_fn=language_model_loss)
    return method.score_all(genotypes, Validation(model, shared.columns, shared.split, c.bptt, c.eval_batches))


def check_scoring(method: str, workers: int, address: str | None) -> None:
    """Refuse, in one line, candidates on workers for a method without candidates, or without Ray."""
    if not issubclass(method_class(method), WeightSharing):
        raise InputError(
            f"--workers {workers} without --seeds: scores candidates on several workers, which "
            f"random search and ENAS do and --method {method} does not"
        )
    check_workers(workers, address)


class RayScoring:
    """`WeightSharing.parallel_scoring` for a search on one process: its candidates split over `workers`."""

    def __init__(
        self,
        config: SearchConfig,
        model: torch.nn.Module,
        validation: Validation,
        workers: int,
        address: str | None = None,
    ):
        self.config, self.model, self.validation = config, model, validation
        self.workers, self.address = workers, address

    def __call__(self, genotypes: Sequence[Genotype]) -> list[float]:
        shared = SharedModel(
            self.config,
            self.model.encoder.num_embeddings,
            {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            self.validation.columns.cpu(),
            self.validation.split.cpu(),
            torch.get_num_threads(),
        )
        per = -(-len(genotypes) // self.workers)
        shares = [list(genotypes[k : k + per]) for k in range(0, len(genotypes), per)]
        return [
            score for scores in map_on_ray(score_share, shared, shares, self.workers, self.address) for score in scores
        ]
