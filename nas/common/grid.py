"""Grids of independent runs (`bin/transfer`, `bin/search-lm --seeds`): each run whole commands as child processes, on
Ray.
`map_on_ray` runs a function over independent items instead (weight-sharing candidates, `nas.runs.candidates`).

A job is one or more toolkit commands run one after another (`python -m MODULE ARGS`, each with its
own log; a later step starts only when the earlier ones exited 0). With `workers` 1 and no
address, jobs run here one after another and Ray is not needed. Otherwise Ray is the engine: up to
`workers` jobs at once, each a Ray task that takes one CPU (and `gpus` GPUs, which Ray hands out
through CUDA_VISIBLE_DEVICES), on a local Ray instance started for the command and stopped after
it, or on the cluster at `address`. Every node must see the same environment and the same paths
(the toolkit, the data, the run directory), as the commands read and write files there; start its
nodes with RAY_worker_niceness=0, or Ray runs every worker at niceness 15.
Outcomes come back as jobs finish, so the caller can report and write its table as it goes;
a failed job does not stop the others.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from .errors import InputError
from .subprocesses import run_module

RAY_HINT = "pip install 'nas-tagger[ray]' (or pip install ray)"
C, T, R = TypeVar("C"), TypeVar("T"), TypeVar("R")


@dataclass(frozen=True)
class Step:
    module: str  # run as python -m MODULE
    args: list[str]
    log: Path


@dataclass(frozen=True)
class Job:
    key: str  # the caller's name for it
    steps: list[Step]
    gpus: float = 0.0


@dataclass(frozen=True)
class Outcome:
    key: str
    code: int  # 0, or the exit code of the step that failed
    failed_step: int | None  # its index
    node: str  # where it ran: Ray's node id, or "local"
    host: str
    started: float  # time.time()
    ended: float


def run_steps(job: Job) -> Outcome:
    """Run a job's steps in turn, here; stop at the first that fails."""
    started, code, failed = time.time(), 0, None
    for k, step in enumerate(job.steps):
        step.log.parent.mkdir(parents=True, exist_ok=True)
        code = run_module(step.module, step.args, step.log)
        if code != 0:
            failed = k
            break
    return Outcome(job.key, code, failed, _node_id(), socket.gethostname(), started, time.time())


def _node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return "local"


def on_ray(workers: int, address: str | None) -> bool:
    """Whether jobs run as Ray tasks (more than one at a time, or on a cluster) rather than here."""
    return workers > 1 or bool(address)


def check_workers(workers: int, address: str | None) -> None:
    """Refuse, in one line, what cannot run: fewer than one worker, or Ray wanted and not installed."""
    if workers < 1:
        raise InputError(f"--workers: must be at least 1, got {workers}")
    if on_ray(workers, address):
        try:
            import ray  # noqa: F401
        except ImportError:
            flag = "--ray-address" if address else f"--workers {workers}"
            raise InputError(f"{flag}: runs at once need Ray, which is not installed; {RAY_HINT}") from None


def run_jobs(
    jobs: Sequence[Job],
    workers: int = 1,
    address: str | None = None,
    on_start: Callable[[Job], None] = lambda job: None,
) -> Iterator[Outcome]:
    """Each job's outcome as it finishes: here, one after another (workers 1, no address), or on Ray.
    `on_start` is called as each job is started (on Ray: handed to the cluster)."""
    check_workers(workers, address)
    if not on_ray(workers, address):
        for job in jobs:
            on_start(job)
            yield run_steps(job)
        return
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        _ray_init(workers, address)
    try:
        task = ray.remote(run_steps)
        waiting, running = list(jobs), []
        while waiting or running:
            while waiting and len(running) < workers:
                job = waiting.pop(0)
                on_start(job)
                running.append(task.options(num_cpus=1, num_gpus=job.gpus).remote(job))
            done, running = ray.wait(running, num_returns=1)
            yield ray.get(done[0])
    finally:
        if started_here:
            ray.shutdown()


def map_on_ray(
    fn: Callable[[C, T], R], common: C, items: Sequence[T], workers: int, address: str | None = None
) -> list[R]:
    """[fn(common, item) for item in items], each a Ray task taking one CPU, up to `workers` at once,
    results in the items' order; `common` goes to Ray's object store once, not once per task. A local
    instance (or the connection to `address`) is started at the first call and kept for later ones;
    Ray stops it when the process exits."""
    check_workers(workers, address)
    import ray

    if not ray.is_initialized():
        _ray_init(workers, address)
    task, shared = ray.remote(fn).options(num_cpus=1), ray.put(common)
    return ray.get([task.remote(shared, item) for item in items])


def _ray_init(workers: int, address: str | None) -> None:
    import ray

    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=True)
    try:
        if address:
            ray.init(address=address, **quiet)
        else:  # a local instance for this command only, sized to the workers asked for; Ray starts its
            # workers at niceness 15 by default, which starves the runs on a machine doing anything else
            ray.init(num_cpus=workers, _system_config={"worker_niceness": 0}, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = f"--ray-address {address}" if address else "a local Ray instance"
        raise InputError(f"{where}: Ray did not start ({str(error).splitlines()[0][:300]})") from None
