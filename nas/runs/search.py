"""The bilevel search (docs/concepts/search-methods.md; DARTS's rnn/train_search.py): α on validation batches, weights on train batches.

`Searcher` runs a search method (`nas.methods`) on the training loop (`nas.runs.loop`): each batch,
the method's α group of that batch takes one step on a validation batch of the same length (random
search and ENAS draw the batch's cell instead), then the weights take one SGD step on the train
batch. At each epoch end the method may run a phase of its own (ENAS: the controller's), and the
log records the perplexities, what the method records of its state (every α and their distance
from uniform) and the genotype derived so far; at the end the method concludes (random search
and ENAS score candidates) and the genotype and the search's metrics are written to the run directory.

Each epoch's log line also carries the search's health (`nas.runs.health`): for a method with α, the
dominant eigenvalue of the Hessian of the validation loss in α (on one fixed validation batch,
eval mode) and each op's share of α's mass; for every method, each op's share of the derived
cell. With --early-stop hessian the DARTS-ES rule may end the search early, and the cell is then
derived from α as it stood a window of epochs before. metrics.json records whether the search
converged by the toolkit's rule (`nas.runs.health.convergence`).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone

import torch
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from nas import __version__
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import Genotype
from nas.cells.search_cell import SearchRNN
from nas.common.errors import InputError
from nas.common.runs import RunDir, autocast
from nas.fast import graphs
from nas.fast.graphs import StepGraphs
from nas.lm.corpus import Corpus, batchify
from nas.lm.evaluation import get_batch, ppl
from nas.lm.model import detach_hidden, lm_loss
from nas.lm.search_model import build_search_model
from nas.methods import method_class, total_epochs
from nas.methods.architect import Batch, split_parameters
from nas.methods.base import Validation
from nas.runs.config import SearchConfig
from nas.runs.distributed import sync_batch_norm
from nas.runs.health import EarlyStop, alpha_stall, cell_shares, convergence, dominant_eigenvalue, op_shares
from nas.runs.loop import LMLoop


class Searcher(LMLoop):
    noun = "search"

    def __init__(self, config: SearchConfig, run_dir: RunDir, corpus: Corpus):
        super().__init__(config, run_dir, corpus, config.time_budget, config.max_rollbacks)
        c, valid = config, corpus.paths["valid"]
        self.search_data = self.ranks.columns(batchify(corpus.valid, c.batch_size, c.bptt, valid)).to(self.device)
        self.valid_data = batchify(corpus.valid, c.eval_batch_size, 1, valid, "--eval-batch-size").to(self.device)
        self.model = sync_batch_norm(build_search_model(c, len(corpus.vocab))).to(self.device)
        self.weights = list(split_parameters(self.model)[0].values())
        self.optimizer = torch.optim.SGD(self.weights, lr=c.lr, weight_decay=c.wdecay)
        self.method = method_class(c.method)(c, self.model, self.full_epoch())
        self.graphs = StepGraphs() if self.records_steps() else None
        self.validation = Validation(self.model, self.search_data, self.valid_data, c.bptt, c.eval_batches,
                                     StepGraphs() if self.graphs is not None else None)
        self.steps_done = 0
        self.hidden_valid = None
        self.arch = {n: p for a in self.method.architects.values() for n, p in a.arch.items()}  # every α, by name
        self.early_stop = EarlyStop(c.early_stop_window, c.early_stop_ratio) if c.early_stop == "hessian" else None
        self.capturable_optimizers()

    @property
    def rnn(self) -> SearchRNN | FrozenRNN:
        return self.model.rnn

    @property
    def epochs(self) -> int:
        return total_epochs(self.config)

    @property
    def wraps(self) -> bool:
        return self.method.wraps

    def batches_per_epoch(self) -> int:
        return self.method.batches_per_epoch(super().batches_per_epoch())

    def reset_hidden(self) -> None:
        super().reset_hidden()
        self.hidden_valid = self.model.init_hidden(self.train_data.size(1))

    def epoch_lr(self) -> float:
        """--lr, decayed from --lr-decay-start on (ENAS's schedule; DARTS's search keeps it constant)."""
        return self.config.epoch_lr(self.epoch + 1)

    def sample_seq_len(self) -> int:
        """bptt, or bptt / 2 for 5% of the batches (the DARTS search code)."""
        bptt = self.config.bptt
        return bptt if self.py_rng.random() < 0.95 else bptt // 2

    def records_steps(self) -> bool:
        """Whether bilevel steps run as recorded CUDA graphs: the backend's choice, for methods whose α
        step is the same GPU work at every batch (first order; not the sampled cells of random search and ENAS)."""
        return (graphs.usable(self.device, self.ranks.parallel) and self.config.order == 1
                and self.method.records_steps)

    def capturable_optimizers(self) -> None:
        if self.graphs is not None:
            for architect in self.method.architects.values():
                graphs.make_capturable(architect.optimizer)

    # -- state -------------------------------------------------------------------------------

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "architects": self.method.state(), "epoch": self.epoch, "steps": self.steps_done,
                **self.position(), "hidden_valid": self.ranks.gather_columns(self.hidden_valid),
                "early_stop": None if self.early_stop is None else self.early_stop.state(), "elapsed": self.elapsed,
                "rollbacks": self.rollbacks, "lr_schedule": [self.config.lr_decay, self.config.lr_decay_start]}

    def restore_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state(state["architects"])
        self.capturable_optimizers()
        if self.graphs is not None:
            self.graphs.clear()  # the α optimisers' states are new tensors
        self.epoch, self.steps_done = state["epoch"], state["steps"]
        self.load_position(state)
        self._check_lr_schedule(state)
        self.hidden_valid = self.ranks.columns(state["hidden_valid"])
        if self.early_stop is not None:
            self.early_stop.load_state(state["early_stop"])
        # --time-budget and --max-rollbacks count over resumes (checkpoints written before they did: from 0)
        self.elapsed, self.rollbacks = state.get("elapsed", 0.0), state.get("rollbacks", 0)

    def _check_lr_schedule(self, state: dict) -> None:
        """A resume may change the lr schedule (--lr-decay, --lr-decay-start) only for epochs not yet begun,
        so that the run stays the one a fresh start with its config would make."""
        decay, start = state.get("lr_schedule", (1.0, 1))  # checkpoints written before the schedule: constant lr
        ran = replace(self.config, lr_decay=decay, lr_decay_start=start)
        begun = self.epoch + (1 if self.batch else 0)
        changed = [e for e in range(1, begun + 1) if ran.epoch_lr(e) != self.config.epoch_lr(e)]
        if changed:
            raise InputError(f"--lr-decay {self.config.lr_decay} --lr-decay-start {self.config.lr_decay_start}: would change "
                             f"the lr of epoch {changed[0]}, which {self.run_dir.path} has already run (it had --lr-decay "
                             f"{decay} --lr-decay-start {start}); a resume may change it from epoch {begun + 1} on")

    # -- steps -------------------------------------------------------------------------------

    def step(self, words: torch.Tensor, targets: torch.Tensor, seq_len: int) -> None:
        valid = get_batch(self.search_data, self.pos % (self.search_data.size(0) - 1), seq_len)
        self.bilevel_step(words, targets, valid, seq_len)

    def bilevel_step(self, words: torch.Tensor, targets: torch.Tensor, valid: Batch, seq_len: int) -> None:
        """The α step of this batch's group on `valid`, then the weight step on (words, targets).

        With `graphs` (a CUDA device) both run as one recorded step (`nas.fast.graphs`), replayed per
        sequence length, learning rate and α group; its loss and gradient norm are checked after it."""
        lr = self.epoch_lr() * seq_len / self.config.bptt  # the DARTS code scales the lr by the sequence length
        if self.graphs is None:
            self.hidden = detach_hidden(self.hidden)
            self.hidden_valid = self.alpha_step(words, targets, self.hidden, valid, self.hidden_valid, lr)
            self.weight_step(words, targets, seq_len)
        else:
            self.set_lr(seq_len)
            key = (lr, self.method.phase(self.batch))
            loss, nll, norm, self.hidden, self.hidden_valid = self.graphs(
                key, functools.partial(self.device_step, lr), words, targets, valid, self.hidden, self.hidden_valid)
            self.check_finite(loss, "loss")
            self.check_finite(norm, "gradient norm")
            self.count_nll(nll, targets)
        self.steps_done += 1

    def alpha_step(self, words: torch.Tensor, targets: torch.Tensor, hidden, valid: Batch, hidden_valid, lr: float):
        """The α step of this batch's group; returns the validation hidden state to carry on."""
        with autocast(self.device, self.config.precision):
            return detach_hidden(self.method.step_alpha(self.batch, (words, targets), hidden, valid,
                                                        detach_hidden(hidden_valid), lr))

    def device_step(self, lr: float, words: torch.Tensor, targets: torch.Tensor, valid: Batch, hidden,
                    hidden_valid) -> tuple:
        """The bilevel step as GPU work alone, for recording: (loss, NLL, gradient norm, hidden, hidden_valid)."""
        hidden_valid = self.alpha_step(words, targets, detach_hidden(hidden), valid, hidden_valid, lr)
        loss, nll, norm, hidden = self.weight_update(words, targets, hidden)
        return loss, nll, norm, hidden, hidden_valid

    def giving_up(self, problem: str) -> str:
        return f"{problem}; {self.kept_note()} (try a lower --lr)"

    # -- epochs ------------------------------------------------------------------------------

    def validate(self) -> float:
        """The method's own end-of-epoch phase (ENAS trains its controller here), then the validation NLL."""
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise InputError(f"weights became non-finite in epoch {self.epoch + 1}; {self.kept_note()}")
        self.method.after_batches(self.validation)
        return self.validation.full()

    def epoch_record(self, valid_nll: float, seconds: float) -> dict:
        """One log line: perplexities, what the method records of its state (α, ...) and the genotype so far."""
        rnn, t = self.rnn, self.totals
        record = {"epoch": self.epoch, "step": self.steps_done, "train_ppl": ppl(t["nll"] / max(t["tokens"], 1)),
                  "valid_ppl": ppl(valid_nll), "lr": self.config.epoch_lr(self.epoch), **self.method.record(rnn)}
        geno = self.method.derive(rnn).to_dict()
        record.update({k: geno[k] for k in ("inter", "attention") if geno[k] is not None})
        record.update({"genotype": geno["nodes"], "tokens": t["tokens"],
                       "tokens_per_s": t["tokens"] / max(t["seconds"], 1e-9), "seconds": t["seconds"]})
        record.update(self.health(geno["nodes"]))
        if self.early_stop is not None and self.ranks.any(self.early_stop.update(record["eigenvalue"], self.arch)):
            record["early_stop"] = {"stopped_at": self.epoch, "derive_epoch": self.early_stop.derive_epoch}
        return record

    # -- health ------------------------------------------------------------------------------

    def health(self, nodes: list) -> dict:
        """Each op's share of the derived cell and of α's mass, and the dominant eigenvalue of ∇²α L_val."""
        record = {"cell_share": cell_shares(nodes)}
        if "rnn.alpha" in self.arch:  # the intra cell's α (not an ESS inter-only search's, nor a weight-sharing one's)
            record["alpha_share"] = op_shares(self.rnn.mixing_weights())
        if self.arch and self.config.hessian_iterations:
            was_training = self.model.training
            self.model.eval()  # no dropout, BatchNorm's running statistics: the same loss at every call
            fixed = {n: w.detach() for n, w in split_parameters(self.model)[0].items()}  # α alone carries gradients
            with sdpa_kernel(SDPBackend.MATH):  # attention's fused kernels are differentiable once only
                eigenvalue, iterations = dominant_eigenvalue(lambda: self.health_loss(fixed), list(self.arch.values()),
                                                             self.config.hessian_iterations, seed=self.config.seed)
            self.model.train(was_training)
            record.update({"eigenvalue": eigenvalue, "eigen_iterations": iterations})
        return record

    def health_loss(self, weights: dict[str, torch.Tensor]) -> torch.Tensor:
        """The validation NLL the Hessian is taken of, under `weights` (detached) and the model's α: the
        first --bptt rows of the α step's validation columns, from a fresh hidden state."""
        words, targets = get_batch(self.search_data, 0, self.config.bptt)
        logits, _, _, _ = functional_call(self.model, {**weights, **self.arch},
                                          (words, self.model.init_hidden(words.size(1))))
        return lm_loss(logits, targets)

    def stopped_early(self) -> bool:
        return self.early_stop is not None and self.early_stop.stopped_at is not None

    def conclude(self) -> tuple[Genotype, dict]:
        """The method's final genotype, named by the method, with the provenance of this search; and the
        method's metrics of how it chose it."""
        log = self.run_dir.read_log()
        c = self.config
        last = log[-1] if log else None
        if self.stopped_early():  # DARTS-ES: the cell of α as it stood at the window's start
            with torch.no_grad():
                for name, alpha in self.early_stop.window_start_alpha().items():
                    self.arch[name].copy_(alpha)
            last = log[self.early_stop.derive_epoch - 1]
        conclusion = self.method.conclude(self.rnn, self.validation)
        geno = conclusion.genotype
        valid_ppl = conclusion.valid_ppl if conclusion.valid_ppl is not None else last["valid_ppl"] if last else None
        if valid_ppl is not None and not math.isfinite(valid_ppl):
            valid_ppl = None  # the model diverged on validation; null keeps genotype.json strict JSON
        provenance = {
            "method": c.method, "order": c.order, "data": {k: str(v) for k, v in self.corpus.paths.items()},
            "seed": c.seed, "epochs": total_epochs(c), "command": c.command,
            "search_valid_ppl": valid_ppl, "epochs_run": self.epoch, "tokens": sum(r.get("tokens", 0) for r in log),
            "health": self.health_summary(log),
            "settings": {k: v for k, v in asdict(c).items() if k not in ("command", "train", "valid", "test")},
            "toolkit_version": __version__, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(self.run_dir.path),
        }
        named = Genotype(geno.nodes, geno.concat, geno.inter, geno.attention, self.method.genotype_name(), provenance)
        return named, conclusion.metrics

    def health_summary(self, log: list[dict]) -> dict:
        """What provenance and metrics.json say of the search's health: the convergence verdict, whether
        α has stalled, the eigenvalue at the first and last epoch, DARTS-ES's stop."""
        eigen = [r["eigenvalue"] for r in log if "eigenvalue" in r]
        weights = lambda alpha: self.rnn.rule.normalise(alpha, self.rnn.steps)  # noqa: E731  (as the log's MAD)
        summary = {"convergence": convergence(log), "alpha_stall": alpha_stall(log, weights),
                   "eigenvalue_first": eigen[0] if eigen else None, "eigenvalue_last": eigen[-1] if eigen else None}
        if self.stopped_early():
            summary["early_stop"] = {"stopped_at": self.early_stop.stopped_at, "derive_epoch": self.early_stop.derive_epoch,
                                     "window": self.early_stop.window, "ratio": self.early_stop.ratio}
        return summary

    def finish(self) -> Genotype:
        """The final genotype; rank 0 writes it (genotype.json) and metrics.json to the run directory."""
        started = time.perf_counter()
        genotype, metrics = self.conclude()
        minutes = (self.elapsed + time.perf_counter() - started) / 60  # every epoch, over resumes, and the conclusion
        if self.ranks.main:
            genotype.save(self.run_dir.path / "genotype.json")
            self.run_dir.save_metrics({"search_valid_ppl": genotype.provenance["search_valid_ppl"],
                                       "genotype": genotype.to_dict(), "epochs": total_epochs(self.config),
                                       "epochs_run": self.epoch, "health": genotype.provenance["health"],
                                       "cell_share": cell_shares(genotype.to_dict()["nodes"]), "minutes": minutes,
                                       **metrics})
        return genotype
