"""Data parallelism for `torchrun bin/search-lm` and `torchrun bin/train-lm`, on `torch.distributed`.

Started by torchrun (WORLD_SIZE > 1), every rank joins one process group (gloo on CPU, NCCL on
CUDA, each rank on `cuda:LOCAL_RANK`) and takes an equal share of the batch columns: rank r of W
reads columns [r·B/W, (r+1)·B/W) of the batchified data, and carries the hidden states of those
columns across batches. The run is then the single-process run of the same global batch, up to
float rounding:
- weight and α gradients (every gradient of the α step, the unrolled step's and the
  Hessian-vector product's included) are averaged over ranks before they are used, so every
  rank applies the same update; with equal shards the mean of the ranks' token-mean losses is
  the global token mean;
- BatchNorm in training (the search cell's) normalises with the mean and variance of the global
  batch, combined from every rank's in one differentiable all-reduce, so the gradients through
  the statistics are those of the full batch too (`SyncedBatchNorm`, our choice over per-shard
  statistics, which would change the search);
- a dropout mask is drawn for the whole batch from the RNG state every rank shares, and each
  rank keeps its columns (`nas.cells.masks.batch_mask`), so ranks draw exactly the single-process
  masks and their RNG states stay equal;
- checkpoints hold the hidden states of all columns (`gather_columns`), so a run resumes under
  any number of ranks; every decision that ends a loop (Ctrl-C, a time budget, a NaN) is agreed.
At each epoch end a checksum of every parameter and buffer is compared across ranks. Only rank
0 writes the run directory (`FollowerRunDir` on the others) and prints; the other ranks print
only error lines (prefixed with their rank) and tracebacks. Validation runs whole on every rank
(no speed-up there, and every rank takes the same decisions); the final test runs on rank 0.

Without torchrun (or with one process) `current()` is `SINGLE`, whose methods return their inputs
unchanged: the commands run exactly as before.
"""

from __future__ import annotations

import atexit
import io
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

from nas.common.errors import InputError
from nas.common.runs import RunDir


class RanksDiverged(InputError):
    """Ranks hold different weights: the run stops with one line rather than train on silently."""


@dataclass(frozen=True)
class Ranks:
    """This process's place among the data-parallel ranks; `SINGLE` when there is one process."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    def device(self, name: str) -> torch.device:
        """The device of this rank: under torchrun, `cuda`/`cuda:N` mean `cuda:LOCAL_RANK`."""
        if self.parallel and name.startswith("cuda"):
            return torch.device("cuda", self.local_rank)
        return torch.device(name)

    # -- columns -------------------------------------------------------------------------------

    def columns(self, data):
        """This rank's share of dim 1 (the batch) of a tensor or a tuple of them (None passes)."""
        if not self.parallel or data is None:
            return data
        if not isinstance(data, torch.Tensor):
            return type(data)(self.columns(d) for d in data)
        batch = data.size(1)
        if batch % self.world:
            raise InputError(
                f"--batch-size {batch}: does not split evenly over {self.world} processes "
                f"(torchrun --nproc_per_node); use a multiple of {self.world}"
            )
        share = batch // self.world
        return data.narrow(1, self.rank * share, share).contiguous()

    def gather_columns(self, data):
        """All ranks' columns side by side (the inverse of `columns`); a collective."""
        if not self.parallel or data is None:
            return data
        if not isinstance(data, torch.Tensor):
            return type(data)(self.gather_columns(d) for d in data)
        parts = [torch.empty_like(data) for _ in range(self.world)]
        dist.all_gather(parts, data.contiguous())
        return torch.cat(parts, 1)

    # -- reductions ----------------------------------------------------------------------------

    def average(self, tensors: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """The mean over ranks of each tensor, in one all-reduce; `tensors` unchanged on one process."""
        if not self.parallel:
            return tensors
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        flat /= self.world
        return [part.view_as(t) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]

    def average_gradients(self, params: Iterable[nn.Parameter]) -> None:
        """Replace every gradient by its mean over ranks (a missing one counts as zero)."""
        if not self.parallel:
            return
        params = list(params)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for p, mean in zip(params, self.average([p.grad for p in params])):
            p.grad.copy_(mean)

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one: loop exits agreed by all."""
        if not self.parallel:
            return flag
        value = torch.tensor([float(flag)], device=self._comm_device())
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def broadcast(self, obj):
        """Rank 0's value of a small picklable object, on every rank."""
        if not self.parallel:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def check_in_sync(self, module: nn.Module, when: str) -> None:
        """Compare a checksum of every parameter and floating buffer across ranks; stop if any differ."""
        if not self.parallel:
            return
        names, sums = [], []
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t.is_floating_point():
                names.append(name)
                sums.append(torch.stack([t.detach().double().sum(), t.detach().double().abs().sum()]))
        local = torch.stack(sums)
        gathered = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(gathered, local)
        for rank, other in enumerate(gathered[1:], start=1):
            bad = ((other - gathered[0]).abs() > 1e-9 * (1 + gathered[0].abs())).any(1).nonzero()
            if len(bad):
                k = int(bad[0])
                raise RanksDiverged(
                    f"ranks out of sync {when}: {names[k]} differs between rank 0 and rank {rank} "
                    f"(checksum {gathered[0][k, 0].item():.10g} vs {other[k, 0].item():.10g}); "
                    "the last checkpoint was written before this point"
                )

    def _comm_device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")

    # -- rank 0 writes ---------------------------------------------------------------------------

    def run_dir(self, run: RunDir) -> RunDir:
        """Rank 0's run directory (its default name included) on every rank; only rank 0's writes."""
        if not self.parallel:
            return run
        path = self.broadcast(str(run.path))
        return RunDir(path) if self.main else FollowerRunDir(path)


SINGLE = Ranks()
_current = SINGLE


def current() -> Ranks:
    """The ranks of this process (`SINGLE` unless `init` joined a torchrun group)."""
    return _current


def init(device: str) -> Ranks:
    """Join torchrun's process group when WORLD_SIZE > 1 (gloo on CPU, NCCL on CUDA); `SINGLE` otherwise."""
    global _current
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or _current.parallel:
        return _current
    ranks = Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if device.startswith("cuda"):
        torch.cuda.set_device(ranks.local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", ranks.local_rank))
    else:
        dist.init_process_group("gloo")
    atexit.register(_leave)
    _current = ranks
    if not ranks.main:
        _quiet(ranks.rank)
    return ranks


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class _ErrorLines(io.TextIOBase):
    """stderr of ranks other than 0: only `error: ...` lines pass, tagged with the rank (not a tty, so no bars)."""

    def __init__(self, rank: int, target):
        self.rank, self.target, self.line = rank, target, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.line += text
        *done, self.line = self.line.split("\n")
        self.line = self.line.rsplit("\r", 1)[-1]
        for line in done:
            if line.startswith("error: "):
                self.target.write(f"rank {self.rank}: {line}\n")
                self.target.flush()
        return len(text)


def _quiet(rank: int) -> None:
    real = sys.__stderr__
    sys.stdout = open(os.devnull, "w", encoding="utf-8")
    sys.stderr = _ErrorLines(rank, real)
    sys.excepthook = lambda kind, value, tb: traceback.print_exception(kind, value, tb, file=real)


# -- BatchNorm statistics of the whole batch (the masks drawn for it are `nas.cells.masks`) -------------


class _SumOverRanks(torch.autograd.Function):
    """all_reduce(SUM) whose backward sums the incoming gradients too: every rank's loss depends on the sum."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class SyncedBatchNorm(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch (every rank's mean and variance combined).

    torch's SyncBatchNorm runs on GPUs only; this one runs wherever `torch.distributed` does. On
    one process, and in eval mode, it is BatchNorm1d.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ranks = _current
        if not (self.training and ranks.parallel):
            return super().forward(x)
        dims = [d for d in range(x.dim()) if d != 1]
        local = x.numel() // x.size(1)
        n = local * ranks.world
        # Each rank's mean and sum of squared deviations, combined as in Chan et al.'s parallel variance:
        # stable where E[x²] − E[x]² would cancel (a channel with a small variance and a large mean).
        local_mean = x.mean(dims, keepdim=True)
        rows = [x.new_zeros(2, x.size(1)) for _ in range(ranks.world)]
        rows[ranks.rank] = torch.stack([local_mean.view(-1), (x - local_mean).pow(2).sum(dims)])
        means, m2 = _SumOverRanks.apply(torch.stack(rows)).unbind(1)  # (world, C) each: every rank's row
        mean = means.mean(0)
        var = (m2.sum(0) + local * (means - mean).pow(2).sum(0)) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(m * mean)
                self.running_var.mul_(1 - m).add_(m * var * n / max(n - 1, 1))
        shape = [1, -1] + [1] * (x.dim() - 2)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y


def sync_batch_norm(model: nn.Module) -> nn.Module:
    """Under data parallelism, make every BatchNorm1d of `model` a `SyncedBatchNorm` (same state); else a no-op."""
    if _current.parallel:
        for module in model.modules():
            if type(module) is nn.BatchNorm1d:
                module.__class__ = SyncedBatchNorm  # no new state: parameters and buffers stay the same objects
    return model


class FollowerRunDir(RunDir):
    """The run directory as ranks other than 0 see it: reads work, writes are rank 0's."""

    def start(self, config: dict, afresh: bool = False, checkpoint: dict | None = None) -> None:
        pass

    def discard(self) -> None:
        pass

    def lock(self) -> None:  # rank 0 holds the run's lock
        pass

    def clean_temp_files(self) -> None:
        pass

    def log(self, record: dict) -> None:
        pass

    def trim_log(self, epochs_done: int) -> None:
        pass

    def save_metrics(self, metrics: dict) -> None:
        pass

    def save_checkpoint(self, state: dict, name: str = "checkpoint.pt") -> None:
        pass
