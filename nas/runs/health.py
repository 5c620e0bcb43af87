"""Search health: what tells a user that a search is collapsing or has converged (docs/concepts/search-health.md).

- `dominant_eigenvalue`: the dominant eigenvalue of the Hessian of the validation loss with
  respect to α, by power iteration on exact Hessian-vector products (double backward). Zela et
  al., "Understanding and Robustifying Differentiable Architecture Search", ICLR 2020
  (arXiv:1909.09656), find that it grows as DARTS collapses onto parameter-free operations and
  that its growth predicts the found cell's poor generalisation.
- `EarlyStop`: their DARTS-ES rule. With λ̄(e) the mean eigenvalue of epochs e−k+1..e (a window of
  k epochs), the search stops at the first epoch e ≥ 2k where λ̄(e−k) / λ̄(e) < ratio (k = 5,
  ratio = 0.75 in the paper: the eigenvalue grew by more than a third over a window), and the
  cell is derived from α as it stood at epoch e − k.
- `op_shares`: the share of each op in α's mixing mass and in the derived cell; `identity_share`
  the part of the derived cell's edges that apply no nonlinearity.
- `convergence`: the rule this toolkit applies the same to every search's log (`CONVERGENCE_RULE`).
- `alpha_stall`: whether α (its mixing weights) has all but stopped moving, which the rule cannot tell from a search
  that has settled: one exploding gradient fills Adam's second moment, and α's steps stay near
  zero for dozens of epochs after it (an I-DARTS search did this; docs/results.md).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Sequence

import torch

from nas.cells.ops import OPS

WINDOW = 5  # epochs: the DARTS-ES window k and the convergence rule's window
ES_RATIO = 0.75  # DARTS-ES: stop when λ̄(e − k) / λ̄(e) falls below this
IDENTITY_WARNING = 0.5  # warn when more than this share of the derived cell's edges are identity
# warn when the mixing weights' largest change in an epoch, over the last WINDOW, is under this part of their largest
# before
ALPHA_STALL = 0.1
CONVERGENCE_RULE = (
    "over the last 5 epochs: the derived genotype unchanged, the MAD of the intra-cell weights "
    "changing by under 5% (relative to its value 5 epochs back), and the search validation "
    "perplexity improving by under 1% an epoch; random search and ENAS (no α): the best "
    "candidate's validation perplexity stable, changing by under 1% an epoch either way"
)


def hessian_vector_product(
    loss: torch.Tensor, params: Sequence[torch.Tensor], vector: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """H·v for the Hessian H of `loss` with respect to `params` (exact: the gradient of ∇loss·v)."""
    grads = torch.autograd.grad(loss, params, create_graph=True)
    dot = sum((g * v).sum() for g, v in zip(grads, vector))
    return [h.detach() for h in torch.autograd.grad(dot, params)]


def dominant_eigenvalue(
    loss_fn: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    iterations: int = 20,
    tolerance: float = 1e-3,
    seed: int = 0,
) -> tuple[float, int]:
    """The eigenvalue of largest magnitude of ∇²_params loss_fn(), and the power iterations it took.

    Power iteration from a seeded random unit vector: v ← Hv/‖Hv‖, λ = vᵀHv, until λ changes by
    under `tolerance` (relative) or after `iterations`. `loss_fn` is called once per iteration and
    must give the same loss each time (eval mode, a fixed batch). The global RNG is left alone.
    """
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device) for p in params]
    v = _unit(v)
    eigenvalue, done = math.nan, 0
    for done in range(1, iterations + 1):
        hv = hessian_vector_product(loss_fn(), params, v)
        previous, eigenvalue = eigenvalue, float(sum((a * b).sum() for a, b in zip(v, hv)))
        norm = _norm(hv)
        if norm == 0.0 or not math.isfinite(norm):
            break
        v = [h / norm for h in hv]
        if math.isfinite(previous) and abs(eigenvalue - previous) <= tolerance * abs(eigenvalue):
            break
    return eigenvalue, done


def _norm(tensors: Sequence[torch.Tensor]) -> float:
    return math.sqrt(sum(float((t * t).sum()) for t in tensors))


def _unit(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    norm = _norm(tensors)
    return [t / norm for t in tensors]


def op_shares(weights: torch.Tensor) -> dict[str, float]:
    """Each op's share of the mixing weights (one row per edge, one column per op in `OPS`), `none` included."""
    mass = weights.detach().double().sum(0)
    return {op: float(m / mass.sum()) for op, m in zip(OPS, mass)}


def cell_shares(nodes: Sequence[Sequence[Sequence]]) -> dict[str, float]:
    """Each op's share of the derived cell's edges (`nodes`: per node its (op, predecessor) pairs)."""
    counts = Counter(op for node in nodes for op, _ in node)
    total = sum(counts.values())
    return {op: counts[op] / total for op in OPS[1:]}


def identity_share(nodes: Sequence[Sequence[Sequence]]) -> float:
    """The part of the derived cell's edges that are identity (parameters, but no nonlinearity)."""
    return cell_shares(nodes)["identity"]


def identity_warning(nodes: Sequence[Sequence[Sequence]], has_alpha: bool = True) -> str | None:
    """A one-line warning when the derived cell is mostly identity edges, else None: for a search with α
    the mark of a collapse; for random search and ENAS, which have none, a choice among cells scored
    on shared weights."""
    share = identity_share(nodes)
    if share <= IDENTITY_WARNING:
        return None
    said = f"warning: {share:.0%} of the derived cell's edges are identity (no nonlinearity)"
    if not has_alpha:
        return (
            f"{said}: the best-scoring cell on the shared weights; check it against random cells "
            "(bin/sample-cells) before relying on it"
        )
    return (
        f"{said}, the mark of a collapsed search (Zela et al. 2020); see its Hessian eigenvalue in the log, "
        "and try --early-stop hessian"
    )


class EarlyStop:
    """DARTS-ES: feeds on each epoch's eigenvalue and α; says when to stop and which epoch's α to derive from."""

    def __init__(self, window: int = WINDOW, ratio: float = ES_RATIO):
        self.window, self.ratio = window, ratio
        self.eigenvalues: list[float] = []
        self.alphas: list[dict[str, torch.Tensor]] = []  # the last window + 1 epochs' α, oldest first
        self.stopped_at: int | None = None  # the epoch the rule fired at

    def update(self, eigenvalue: float, alpha: dict[str, torch.Tensor]) -> bool:
        """Record epoch e (= the count so far) and return whether the rule has fired (α is kept as it stood then)."""
        if self.stopped_at is not None:
            return True
        self.eigenvalues.append(eigenvalue)
        self.alphas = [*self.alphas, {k: t.detach().clone() for k, t in alpha.items()}][-(self.window + 1) :]
        k, e = self.window, len(self.eigenvalues)
        if e >= 2 * k:
            before = sum(self.eigenvalues[e - 2 * k : e - k]) / k
            now = sum(self.eigenvalues[e - k :]) / k
            if now > 0 and before / now < self.ratio:
                self.stopped_at = e
        return self.stopped_at is not None

    @property
    def derive_epoch(self) -> int | None:
        """The epoch whose α the cell comes from once the rule fired (e − k)."""
        return None if self.stopped_at is None else self.stopped_at - self.window

    def window_start_alpha(self) -> dict[str, torch.Tensor]:
        """α as it stood at epoch e − k."""
        return self.alphas[0]

    def state(self) -> dict:
        return {"eigenvalues": list(self.eigenvalues), "alphas": self.alphas, "stopped_at": self.stopped_at}

    def load_state(self, state: dict) -> None:
        self.eigenvalues, self.alphas = list(state["eigenvalues"]), list(state["alphas"])
        self.stopped_at = state["stopped_at"]


def convergence(log: Sequence[dict], window: int = WINDOW) -> dict:
    """The convergence rule (`CONVERGENCE_RULE`) applied to a search's log: the verdict and each test's figure."""
    if len(log) < window + 1:
        return {"converged": False, "why": f"fewer than {window + 1} epochs", "rule": CONVERGENCE_RULE}
    last = log[-(window + 1) :]
    tests = {}
    if "mad" not in last[-1]:  # no α: the best candidate's score alone (which cell is best may flip among near-ties)
        score = "best_candidate_ppl" if "best_candidate_ppl" in last[-1] else "valid_ppl"
        scores = [r[score] for r in last]
        changes = [abs(a - b) / a for a, b in zip(scores, scores[1:]) if math.isfinite(a) and math.isfinite(b)]
        tests["largest_ppl_change"] = max(changes) if len(changes) == window else None
        ok = tests["largest_ppl_change"] is not None and tests["largest_ppl_change"] < 0.01
        return {"converged": bool(ok), **tests, "rule": CONVERGENCE_RULE}
    tests["genotype_unchanged"] = all(r["genotype"] == last[-1]["genotype"] for r in last[1:])
    scores = [r["valid_ppl"] for r in last]
    gains = [(a - b) / a for a, b in zip(scores, scores[1:]) if math.isfinite(a) and math.isfinite(b)]
    tests["largest_ppl_gain"] = max(gains) if len(gains) == window else None
    mad_then, mad_now = last[0]["mad"], last[-1]["mad"]
    tests["mad_change"] = abs(mad_now - mad_then) / mad_then if mad_then else None
    ok = (
        tests["genotype_unchanged"]
        and tests["largest_ppl_gain"] is not None
        and tests["largest_ppl_gain"] < 0.01
        and tests["mad_change"] is not None
        and tests["mad_change"] < 0.05
    )
    return {"converged": bool(ok), **tests, "rule": CONVERGENCE_RULE}


def alpha_stall(
    log: Sequence[dict], mixing_weights: Callable[[torch.Tensor], torch.Tensor], window: int = WINDOW
) -> dict | None:
    """The largest change of any mixing weight in one epoch over the last `window` epochs and over the
    epochs before them, from the α each log line records and the search's own rule
    (`mixing_weights(α)`, e.g. a softmax per edge); `stalled` when the first is under `ALPHA_STALL` of
    the second. None without α or with fewer than window + 1 epochs.

    Mixing weights, not α: a softmax ignores a shift of all of an edge's α together (α's weight decay
    and Adam's steps make such shifts), which moved α by 0.03 a round in an ESS search whose weights
    moved by 0.0002. The first epoch's change is counted from α = 0: α starts at 10⁻³·N(0, 1)
    (`nas.cells.search_cell`, `nas.cells.gates`), which the log does not record, and a search whose
    weights moved in its first epoch and hardly ever after has stalled as surely as one that stopped later.

    Adam moves α by about its learning rate a step whatever the gradient's size, so a search that
    has settled still moves its weights every epoch (by 15 to 75% of their earlier largest change in
    our DARTS and ESS studies, decayed or not); a change under a tenth of it means Adam's steps have shrunk.
    """
    alphas = [torch.tensor(record["alpha"], dtype=torch.float64) for record in log if "alpha" in record]
    if len(alphas) < window + 1:
        return None
    weights = [mixing_weights(alpha) for alpha in [torch.zeros_like(alphas[0])] + alphas]
    moves = [float((after - before).abs().max()) for before, after in zip(weights, weights[1:])]
    recent, earlier = max(moves[-window:]), max(moves[:-window])
    return {
        "recent": recent,
        "earlier": earlier,
        "earlier_epoch": moves.index(earlier) + 1,
        "stalled": recent < ALPHA_STALL * earlier,
    }


def alpha_stall_warning(stall: dict | None, window: int = WINDOW) -> str | None:
    """A one-line warning when `alpha_stall` found α stalled, else None."""
    if stall is None or not stall["stalled"]:
        return None
    return (
        "warning: α has nearly stopped moving: the largest change of a mixing weight in one epoch over the last "
        f"{window} epochs is "
        f"{stall['recent']:.2g}, against {stall['earlier']:.2g} in epoch {stall['earlier_epoch']}; a search that "
        "meets the convergence rule this way has stalled, not settled (one exploding gradient, a spike of the "
        "log's train ppl or eigenvalue, can hold Adam's steps on α near zero for many epochs)"
    )


def summary_lines(health: dict, nodes: Sequence[Sequence[Sequence]], has_alpha: bool, unit: str = "epoch") -> list[str]:
    """What a search command says of its health at the end (`health`: metrics.json's, `nodes`: the found
    cell's, `unit`: what an epoch is called): DARTS-ES's stop, the convergence verdict, the warnings."""
    lines = []
    if "early_stop" in health and health["early_stop"].get("rule") == "converged":
        lines.append(
            f"stopped at {unit} {health['early_stop']['stopped_at']}: "
            "the convergence rule held (--early-stop converged)"
        )
    elif "early_stop" in health:
        stop = health["early_stop"]
        lines.append(
            f"early stop (DARTS-ES): the Hessian eigenvalue grew past the rule at {unit} {stop['stopped_at']}; "
            f"the cell is α's of {unit} {stop['derive_epoch']}"
        )
    verdict = health["convergence"]
    figures = ", ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in verdict.items()
        if k not in ("converged", "rule")
    )
    lines.append(f"converged by the rule: {'yes' if verdict['converged'] else 'no'} ({figures})")
    warnings = (alpha_stall_warning(health.get("alpha_stall")), identity_warning(nodes, has_alpha=has_alpha))
    return lines + [w for w in warnings if w]
