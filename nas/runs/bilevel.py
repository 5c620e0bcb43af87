"""What both searches share: the LM search (`nas.runs.search`) and the tagging search (`tagger.tagging_search`);
docs/concepts/search-methods.md.

Each search is a training loop (`nas.runs.loop`) that holds a `BilevelSearch` (composition: the loop
calls it from its epoch hooks, it reads the task's hooks back through `SearchTask`). Together they keep
the order the search methods (`nas.methods`) rely on, and record what the two tasks record alike:

- each batch (the loop's): `nas.methods.architect.bilevel_step`: the method's α step on a batch of the
  split α learns on, what the method changes for the weight step (SDARTS-RS's random draw in its mixing
  rule), then the task's weight step on a train batch;
- each epoch end: `method.after_batches` (ENAS's controller, random search's panel, the epoch moving
  β-DARTS's λ, DARTS−'s β, SDARTS's ε), then the validation score, then the log line (the task's
  scores, `method.record`, the genotype derived so far, the search's health: each op's share of the
  cell and of α's mass, the dominant eigenvalue of the Hessian of α's loss), DARTS-ES, then the checkpoint
  (the method's state in it; `config.epochs`, the total);
- at the end: the method's conclusion (the cell of α at DARTS-ES's window start, if it fired), the
  provenance and the health summary (`nas.runs.health.convergence`), genotype.json and metrics.json.

A task supplies the hooks of `SearchTask`: its layer that holds α, its validation score and the record
of it, the loss the Hessian is taken of, and what its provenance names as data.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Protocol

import torch
import torch.nn as nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from nas import __version__, speed
from nas.cells.genotype import Genotype, save
from nas.common.errors import InputError
from nas.methods.architect import split_parameters
from nas.methods.base import Conclusion, Scoring, SearchMethod
from nas.runs.health import EarlyStop, alpha_stall, cell_shares, convergence, dominant_eigenvalue, op_shares


class SearchTask(Protocol):
    """A search on one task as its `BilevelSearch` reads it: a `TrainingLoop` (its model, config, run directory,
    ranks, epoch, elapsed time) with its method, its validation split, and these hooks. `config` needs `seed`,
    `method`, `order`, `command`, `hessian_iterations`, `early_stop`, `early_stop_window` and `early_stop_ratio`."""

    method: SearchMethod
    validation: Scoring
    steps_done: int

    @property
    def cell(self) -> nn.Module:
        """The layer that holds α and derives the genotype."""

    def validation_score(self) -> Any:
        """What the epoch's record reads of the model as it stands, after the method's epoch-end phase."""

    def scores(self, valid: Any) -> dict:
        """The log line's scores of the epoch (`valid`: what `validation_score` gave)."""

    def counts(self, seconds: float) -> dict:
        """The log line's counts of the epoch (tokens, tokens per second, seconds)."""

    def health_loss(self, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """The loss α learns on, on one fixed batch, under `weights` (detached) and the model's α, in eval mode."""

    def search_score(self, conclusion: Conclusion, last: dict | None) -> dict:
        """The chosen cell's score for provenance and metrics.json (`last`: the log line of the epoch it comes from)."""

    def provenance_data(self, log: list[dict]) -> dict:
        """What the provenance names of the task and its data."""

    def genotype_name(self) -> str:
        """The name of the genotype the search writes."""


class BilevelSearch:
    """The shared part of the search `task` (a `TrainingLoop` and a `SearchTask`), which holds it as `bilevel`
    and calls `validate`, `epoch_record`, `stopped_early`, `state`/`load_state` and `finish` from its own hooks."""

    def __init__(self, task: SearchTask, settings_not_kept: tuple[str, ...] = ("command",)):
        """`task`'s method is built; `settings_not_kept`: config fields the provenance's settings leave out."""
        c = task.config
        self.task = task
        self.settings_not_kept = settings_not_kept
        # every α of the method, by name, and DARTS-ES's rule when --early-stop hessian
        self.arch: dict[str, nn.Parameter] = {n: p for a in task.method.architects.values() for n, p in a.arch.items()}
        self.early_stop = EarlyStop(c.early_stop_window, c.early_stop_ratio) if c.early_stop == "hessian" else None
        self.stop_when_converged = c.early_stop == "converged"
        self.converged_at: int | None = None  # the epoch the convergence rule first held (--early-stop converged)

    # -- epochs ------------------------------------------------------------------------------

    def validate(self) -> Any:
        """The method's own end-of-epoch phase (ENAS trains its controller here), then the validation score."""
        t = self.task
        if not all(torch.isfinite(p).all() for p in t.model.parameters()):
            raise InputError(f"weights became non-finite in epoch {t.epoch + 1}; {t.kept_note()}")
        t.method.after_batches(t.validation)
        return t.validation_score()

    def epoch_record(self, valid: Any, seconds: float) -> dict:
        """One log line: the task's scores, what the method records of its state (α, ...), the genotype so
        far, the counts, the health; and DARTS-ES's stop when its rule fired."""
        t = self.task
        record = {"epoch": t.epoch, "step": t.steps_done, **t.scores(valid), **t.method.record(t.cell)}
        geno = t.method.derive(t.cell).to_dict()
        record.update({k: geno[k] for k in ("inter", "attention") if geno[k] is not None})
        record.update({"genotype": geno["nodes"], **t.counts(seconds)})
        record.update(self.health(geno["nodes"]))
        if self.early_stop is not None and t.ranks.any(self.early_stop.update(record["eigenvalue"], self.arch)):
            record["early_stop"] = {"stopped_at": t.epoch, "derive_epoch": self.early_stop.derive_epoch}
        if self.stop_when_converged and t.ranks.any(convergence([*t.run_dir.read_log(), record])["converged"]):
            self.converged_at = t.epoch
            record["early_stop"] = {"stopped_at": t.epoch, "rule": "converged"}
        return record

    # -- health ------------------------------------------------------------------------------

    def health(self, nodes: list) -> dict:
        """Each op's share of the derived cell and of α's mass, and the dominant eigenvalue of the Hessian
        of `health_loss` in α (--hessian-iterations power iterations at most)."""
        t = self.task
        record = {"cell_share": cell_shares(nodes)}
        alpha = getattr(t.cell, "alpha", None)
        if alpha is not None and any(
            alpha is p for p in self.arch.values()
        ):  # the intra cell's α (not ESS's gates alone)
            record["alpha_share"] = op_shares(t.cell.mixing_weights())
        if self.arch and t.config.hessian_iterations:
            was_training = t.model.training
            t.model.eval()  # no dropout, BatchNorm's running statistics: the same loss at every call
            fixed = {n: w.detach() for n, w in split_parameters(t.model)[0].items()}  # α alone carries gradients
            # attention's fused kernels and compiled time steps are differentiable once only
            with sdpa_kernel(SDPBackend.MATH), speed.on_definition(t.model):
                eigenvalue, iterations = dominant_eigenvalue(
                    lambda: t.health_loss(fixed),
                    list(self.arch.values()),
                    t.config.hessian_iterations,
                    seed=t.config.seed,
                )
            t.model.train(was_training)
            record.update({"eigenvalue": eigenvalue, "eigen_iterations": iterations})
        return record

    def stopped_by_es(self) -> bool:
        """DARTS-ES's rule fired (the cell then comes from an earlier α)."""
        return self.early_stop is not None and self.early_stop.stopped_at is not None

    def stopped_early(self) -> bool:
        return self.stopped_by_es() or self.converged_at is not None

    def state(self) -> dict:
        """The early stops' part of the checkpoint."""
        return {
            "early_stop": None if self.early_stop is None else self.early_stop.state(),
            "converged_at": self.converged_at,
        }

    def load_state(self, state: dict) -> None:
        if self.early_stop is not None:
            self.early_stop.load_state(state["early_stop"])
        self.converged_at = state.get("converged_at")  # checkpoints written before the option lack it

    def health_summary(self, log: list[dict]) -> dict:
        """What provenance and metrics.json say of the search's health: the convergence verdict, whether
        α has stalled, the eigenvalue at the first and last epoch, DARTS-ES's stop."""
        t = self.task
        eigen = [r["eigenvalue"] for r in log if "eigenvalue" in r]
        weights = lambda alpha: t.cell.rule.normalise(alpha, t.cell.steps)  # noqa: E731  (as the log's MAD)
        summary = {
            "convergence": convergence(log),
            "alpha_stall": alpha_stall(log, weights),
            "eigenvalue_first": eigen[0] if eigen else None,
            "eigenvalue_last": eigen[-1] if eigen else None,
        }
        if self.converged_at is not None:
            summary["early_stop"] = {"stopped_at": self.converged_at, "rule": "converged"}
        if self.stopped_by_es():
            summary["early_stop"] = {
                "stopped_at": self.early_stop.stopped_at,
                "derive_epoch": self.early_stop.derive_epoch,
                "window": self.early_stop.window,
                "ratio": self.early_stop.ratio,
            }
        return summary

    # -- the result --------------------------------------------------------------------------

    def conclude(self) -> tuple[Genotype, dict]:
        """The method's final genotype, named by the method, with the provenance of this search; and the
        chosen cell's score with the method's metrics of how it chose it."""
        t = self.task
        log = t.run_dir.read_log()
        c = t.config
        last = log[-1] if log else None
        if self.stopped_by_es():  # DARTS-ES: the cell of α as it stood at the window's start
            with torch.no_grad():
                for name, alpha in self.early_stop.window_start_alpha().items():
                    self.arch[name].copy_(alpha)
            last = log[self.early_stop.derive_epoch - 1]
        conclusion = t.method.conclude(t.cell, t.validation)
        geno = conclusion.genotype
        score = t.search_score(conclusion, last)
        provenance = {
            "method": c.method,
            "order": c.order,
            **t.provenance_data(log),
            "seed": c.seed,
            "epochs": t.epochs,
            "command": c.command,
            **score,
            "epochs_run": t.epoch,
            "health": self.health_summary(log),
            "settings": {k: v for k, v in asdict(c).items() if k not in self.settings_not_kept},
            "toolkit_version": __version__,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(t.run_dir.path),
        }
        named = Genotype(geno.nodes, geno.concat, geno.inter, geno.attention, t.genotype_name(), provenance)
        return named, {**score, **conclusion.metrics}

    def finish(self) -> Genotype:
        """The final genotype; rank 0 writes it (genotype.json) and metrics.json to the run directory."""
        t = self.task
        started = time.perf_counter()
        genotype, metrics = self.conclude()
        minutes = (t.elapsed + time.perf_counter() - started) / 60  # every epoch, over resumes, and the conclusion
        if t.ranks.main:
            save(genotype, t.run_dir.path / "genotype.json")
            t.run_dir.save_metrics(
                {
                    "genotype": genotype.to_dict(),
                    "epochs": t.epochs,
                    "epochs_run": t.epoch,
                    "health": genotype.provenance["health"],
                    "cell_share": cell_shares(genotype.to_dict()["nodes"]),
                    "minutes": minutes,
                    **metrics,
                }
            )
        return genotype
