"""What a tagger training keeps so that `bin/train-tagger --resume` ends where an uninterrupted run would.

flair 0.15's `ModelTrainer` has no resume of its own: its `epoch` argument only sets where the
epoch count starts; the optimiser and the annealing scheduler are made afresh in `train_custom`,
and its best dev score is a local variable. So `TrainingState`, a trainer plugin, keeps

- `checkpoint.pt` after every epoch: the model's weights, the optimiser (its annealed lr
  included), the scheduler, the best score, the epoch times and the random states (torch, Python,
  numpy; the next epoch's shuffle and dropout are drawn from them), as tensors and plain values
  loaded with weights_only (`nas.common.runs`);
- `best-model.pt`, by flair's own rule (dev micro F1 strictly above the best so far, from 0; the
  train loss when there is no dev split): flair is told to keep none (`use_final_model_for_eval`),
  since after a resume it would compare against 0 again (its log line naming the model the
  final evaluation uses is put right);
- the mark of an unfinished training: every model file written while training carries
  `"training_complete": false` in its model card, and the run flips it once training ends
  (`final-model.pt` is written complete; `best-model.pt` has its card marked in its own file, its model untouched);
  `bin/tag` and
  `bin/evaluate` warn about a model whose training did not finish.

The epoch's row of flair's loss.tsv is written before its checkpoint, and a resume drops the rows
of epochs after the checkpoint's (`trim_loss_table`), so a kill between the two loses neither. A
resume changes nothing of the run until its first checkpoint is written (`nas.common.runs`): its
config.json and the trimmed loss.tsv are written with it, and a failure first puts back what it
appended and the best-model.pt it replaced.
Ctrl-C stops at the end of the epoch, after its checkpoint (`nas.common.runs.Interrupted`); a second
Ctrl-C stops at once, keeping the last checkpoint.

flair loads with this module; `tagger.train` imports it when a training starts.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from flair.distributed_utils import is_main_process
from flair.trainers.plugins.base import TrainerPlugin
from flair.trainers.plugins.functional.anneal_on_plateau import AnnealingPlugin
from flair.trainers.plugins.functional.linear_scheduler import LinearSchedulerPlugin

from nas.common.errors import InputError
from nas.common.runs import Interrupted, RunDir, StopFlag, rng_state, set_rng_state

from . import model_file
from .pooled_memory import holding

log = logging.getLogger("flair")

FORMAT = model_file.CHECKPOINT_FORMAT
COMPLETE = "training_complete"  # the model card's mark
LOSS_TABLE = "loss.tsv"


def resumed_line(epoch: int) -> str:
    return f"resumed from the checkpoint of epoch {epoch}: training continues with epoch {epoch + 1}"


def is_complete(model) -> bool:
    """False for a model saved while its training was still running (a file of an older toolkit counts as complete)."""
    return (getattr(model, "model_card", None) or {}).get(COMPLETE, True) is not False


def load_checkpoint(run: RunDir) -> dict | None:
    """The checkpoint of a tagger run (None: there is none yet, the run starts afresh)."""
    if not run.checkpoint.is_file():
        return None
    state = run.load_checkpoint()
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise InputError(f"{run.checkpoint}: not a checkpoint of bin/train-tagger")
    return state


def trim_loss_table(folder: Path, epochs_done: int) -> None:
    """Keep the header and the rows of the epochs the checkpoint holds; with none, remove the table
    (flair writes its header again at epoch 1)."""
    path = folder / LOSS_TABLE
    if not path.is_file():
        return
    if epochs_done == 0:
        path.unlink()
        return
    header, *rows = path.read_text(encoding="utf-8").split("\n")
    rows = rows[:-1]  # what follows the last newline: nothing, or a row torn by a kill
    kept = [row for row in rows if row.split("\t")[0].isdigit() and int(row.split("\t")[0]) <= epochs_done]
    run = RunDir(folder)  # held, and written with the resume's first checkpoint (nas.common.runs)
    run.cut_torn(LOSS_TABLE)
    run.defer_trim(LOSS_TABLE, ("\n".join([header, *kept]) + "\n").encode("utf-8"))  # flair writes EPOCH first


class AppendingLog(TrainerPlugin):
    """flair's training.log, continued by a resume (flair's own log plugin starts the file anew), which
    it marks with a line naming the epoch training continues with, whatever the logger's level."""

    def __init__(self, path: Path, resumed_after: int = 0):
        super().__init__()
        self.handler = logging.FileHandler(path, mode="a" if resumed_after else "w", encoding="utf-8")
        self.handler.setLevel(logging.INFO)
        self.handler.setFormatter(logging.Formatter("%(asctime)-15s %(message)s"))
        if resumed_after:
            self.handler.handle(
                logging.makeLogRecord(
                    {"levelno": logging.INFO, "levelname": "INFO", "msg": resumed_line(resumed_after)}
                )
            )
        log.addHandler(self.handler)

    @TrainerPlugin.hook("_training_exception", "after_training")
    def close(self, **kw) -> None:
        self.handler.close()
        log.removeHandler(self.handler)

    @property
    def attach_to_all_processes(self) -> bool:
        return False


class TrainingState(TrainerPlugin):
    """Checkpoints, the best model and the completion mark of one training (see the module's docstring).

    Attach it after the schedule (annealing or linear) and loss-table plugins: its `after_evaluation` must see the
    scheduler stepped and the epoch's row written. `state` is the checkpoint to continue from (None:
    a fresh start); `on_epoch(self)` runs after each checkpoint (tests stop a run with it); `memory`
    is the pooled-Flair memory each model file is saved with (`tagger.pooled_memory.pool_memory`).
    """

    def __init__(
        self,
        folder: Path,
        schedule: AnnealingPlugin | LinearSchedulerPlugin,
        timer,
        best_by_dev: bool,
        keep_best: bool,
        dev_f1_untrained: float | None,
        state: dict | None = None,
        on_epoch: Callable[["TrainingState"], None] | None = None,
        memory: list | None = None,
    ):
        super().__init__()
        self.memory = memory or []  # the pooled-Flair memory every model file is saved with (tagger.pooled_memory)
        self.run = RunDir(folder)
        self.schedule, self.timer, self.state, self.on_epoch = schedule, timer, state, on_epoch
        self.best_by_dev, self.keep_best, self.dev_f1_untrained = best_by_dev, keep_best, dev_f1_untrained
        self.best = (0.0 if best_by_dev else math.inf) if state is None else state["best_score"]
        self.epoch = 0 if state is None else state["epoch"]
        self.stop = StopFlag()
        self.failed = False

    @TrainerPlugin.hook
    def after_setup(self, **kw) -> None:
        log.addFilter(self._final_model_line)
        self.model.model_card[COMPLETE] = False
        if self.state is None:
            return
        self.trainer.optimizer.load_state_dict(self.state["optimizer"])
        self.schedule.scheduler.load_state_dict(self.state["scheduler"])
        self.schedule.store_learning_rate()
        self.timer.train_seconds[:] = self.state["timer"]["train"]
        self.timer.epoch_seconds[:] = self.state["timer"]["epoch"]
        self.timer.dev_f1[:] = self.state["timer"].get("dev_f1", [])
        _set_random_states(self.state["random"])
        self.state = None  # only the weights, which train_run loaded, stay in memory

    @TrainerPlugin.hook
    def after_evaluation(self, epoch: int, validation_scores: tuple, **kw) -> None:
        self.epoch = epoch
        if self.keep_best and validation_scores:
            score = validation_scores[0]
            if score > self.best if self.best_by_dev else score < self.best:
                self.best = score
                self._save_model(self.run.path / "best-model.pt")
        if is_main_process():
            self.run.save_checkpoint(self.checkpoint())
        _barrier()
        if self.on_epoch is not None:
            self.on_epoch(self)
        if self.stop.requested:
            raise Interrupted(f"stopped after epoch {epoch}, its checkpoint written")

    @TrainerPlugin.hook
    def metric_recorded(self, record) -> None:
        """A batch loss that is not finite (NaN or inf: a too-high --lr, bad vectors) stops the training
        before a model holding it is saved; the last checkpoint stays."""
        if tuple(record.name.parts) == ("train", "batch_loss") and not math.isfinite(record.value):
            self._non_finite(f"the training loss became {record.value}")

    @TrainerPlugin.hook
    def after_training_epoch(self, epoch: int, **kw) -> None:
        """The weights an epoch's last step left, checked before they are evaluated and saved."""
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            self._non_finite("the weights became non-finite")

    def _non_finite(self, problem: str) -> None:
        kept = f"the checkpoint of epoch {self.epoch} is kept" if self.epoch else "no epoch had finished"
        raise InputError(
            f"{problem} in epoch {self.epoch + 1}: the training diverged; {kept} (a lower --lr or --clip avoids it)"
        )

    @TrainerPlugin.hook
    def _training_exception(self, **kw) -> None:
        self.failed = True
        self.run.roll_back()  # a resume that fails before its first checkpoint leaves the run as it was

    @TrainerPlugin.hook
    def _training_finally(self, **kw) -> None:
        """Training ended: write final-model.pt (the model now holds the last epoch's weights), complete.
        flair ends on its own KeyboardInterrupt too, which here is a second Ctrl-C: stop there instead."""
        log.removeFilter(self._final_model_line)
        if self.failed:
            return
        if self.stop.requested:
            raise Interrupted(f"stopped in epoch {self.epoch + 1}; the checkpoint of epoch {self.epoch} is kept")
        self.model.model_card[COMPLETE] = True
        self._save_model(self.run.path / "final-model.pt")

    def mark_best_complete(self) -> None:
        """Mark best-model.pt complete in its own file: only the card changes. The model in memory is
        not saved again: it holds the best epoch's weights (flair loaded them) but the last epoch's
        pooled-Flair memory, a pair no epoch ever had."""
        path = self.run.path / "best-model.pt"
        if self.model.model_card.get(COMPLETE) and path.is_file() and is_main_process():
            state = model_file.load(path)
            state["model_card"] = {**state["model_card"], COMPLETE: True}
            model_file.save(path, state)
        _barrier()

    def _final_model_line(self, record: logging.LogRecord) -> bool:
        """flair names the final model from `use_final_model_for_eval`, which says nothing here: name the one tested."""
        if record.getMessage().startswith("Final evaluation on model"):
            record.msg, record.args = (
                "Final evaluation on "
                + (
                    "model from best epoch (best-model.pt)"
                    if self.keep_best
                    else "model after last epoch (final-model.pt)"
                ),
                (),
            )
        return True

    def checkpoint(self) -> dict:
        return {
            "format": FORMAT,
            "epoch": self.epoch,
            "model": self.model.state_dict(),
            "optimizer": self.trainer.optimizer.state_dict(),
            "scheduler": self.schedule.scheduler.state_dict(),
            "best_score": self.best,
            "dev_f1_untrained": self.dev_f1_untrained,
            "timer": {
                "train": list(self.timer.train_seconds),
                "epoch": list(self.timer.epoch_seconds),
                "dev_f1": list(self.timer.dev_f1),
            },
            "random": _random_states(),
        }

    def _save_model(self, path: Path) -> None:
        if is_main_process():
            self.run.keep_until_written(path.name)
            with holding(self.model, self.memory):
                self.model.save(path)
        _barrier()


def _barrier() -> None:
    """Under flair's multi-GPU training, no process reads a file before the main one has written it."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()


def _random_states() -> dict:
    """The states of the generators flair seeds (`flair.set_seed`): torch's, Python's global one, numpy's."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {**rng_state(random), "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]}


def _set_random_states(states: dict) -> None:
    set_rng_state(states, random)
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
