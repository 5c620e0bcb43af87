"""Multi-seed search and selection, as DARTS and I-DARTS pick their cells (searches are seed-sensitive:
docs/concepts/search-methods.md).

`bin/search-lm --seeds 1,2,3,4 --workers K` runs one `bin/search-lm` process per seed, at most K at
a time (on Ray when K > 1 or with --ray-address: `nas.common.grid`), each in RUN_DIR/seed-S/search.
As soon as a seed's search ends, the same worker retrains its derived cell from scratch with
`bin/train-lm` for `--select-budget` minutes (RUN_DIR/seed-S/retrain; train-lm's DARTS protocol,
shrunk with `--select-args` where wanted). Each process's output goes to seed-S/search.log and
seed-S/retrain.log. A seed whose search or retraining fails is recorded as failed with its exit
code and last error line; the others go on.
RUN_DIR/leaderboard.json ranks the seeds by retrained validation perplexity (the search's
validation perplexity is recorded too, but says little: cells are judged after retraining), and
the winner's genotype is written to RUN_DIR/genotype.json and `--out`.

With `--device cuda` on Ray, each seed takes one GPU, which Ray hands it through CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Callable

from nas.cells.genotype import load, save
from nas.common.errors import InputError
from nas.common.ranges import SEED
from nas.common.files import atomic_write_json, read_json
from nas.common.grid import Job, Outcome, Step, check_workers, on_ray, run_jobs
from nas.common.subprocesses import last_error
from nas.common.distributed import current


def parse_seeds(text: str) -> list[int]:
    """The seeds of `--seeds`, every one checked before the first search starts."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--seeds {text}: expected comma-separated integers such as 1,2,3,4") from None
    if not seeds:
        raise InputError(f"--seeds {text!r}: no seed given (e.g. --seeds 1,2,3,4)")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text}: a seed is repeated")
    for seed in seeds:
        problem = SEED.problem(seed)
        if problem:
            raise InputError(f"--seeds {text}: seed {seed}: {problem}")
    return seeds


# bin/train-lm flags the selection sets itself for each retraining, so --select-args may not
SELECTION_FLAGS = (
    "--cell",
    "--train",
    "--valid",
    "--test",
    "--device",
    "--time-budget",
    "--run-dir",
    "--resume",
    "--data",
    "--test-batch-size",
)


def select_arguments(text: str) -> list[str]:
    """`--select-args` as bin/train-lm arguments, parsed by bin/train-lm's own flags before any search
    starts (the command checks them against bin/train-lm's flags next): a typo there would otherwise fail
    every seed's retraining after its search."""
    try:
        args = shlex.split(text)
    except ValueError as err:
        raise InputError(f"--select-args {text}: {err}") from None
    for arg in args:
        if arg.split("=")[0] in SELECTION_FLAGS:
            raise InputError(
                f"--select-args: {arg.split('=')[0]} is set by the selection itself for each seed's "
                f"retraining ({', '.join(SELECTION_FLAGS)})"
            )
    return args


def seed_search_args(given: dict[str, Any]) -> list[str]:
    """The bin/search-lm arguments of the flags given (flag → value) that every seed's search shares."""
    args = []
    for flag, value in given.items():
        args += [flag] if value is True else [flag, str(value)]
    return args


class SeedRuns:
    """One multi-seed search in `run_dir`; `search_args` are the bin/search-lm arguments every seed shares.

    `report` receives a line as each seed starts, moves to retraining and ends (the command prints them).
    """

    def __init__(
        self,
        run_dir: Path,
        seeds: list[int],
        workers: int,
        search_args: list[str],
        splits: dict[str, str],
        device: str,
        select_budget: float,
        select_args: list[str],
        command: str,
        report: Callable[[str], None] = lambda line: None,
        address: str | None = None,
        seeds_per_gpu: int = 1,
    ):
        if current().parallel or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise InputError("--seeds: run it without torchrun (each seed is its own process)")
        check_workers(workers, address)
        if seeds_per_gpu > 1 and not (device.startswith("cuda") and on_ray(workers, address)):
            raise InputError(
                f"--seeds-per-gpu {seeds_per_gpu}: only with --device cuda and seeds run on Ray "
                "(--workers above 1 or --ray-address)"
            )
        self.seeds_per_gpu = seeds_per_gpu
        if not select_budget > 0:
            raise InputError(f"--select-budget: must be a positive number of minutes, got {select_budget}")
        self.run_dir, self.seeds, self.workers, self.address = Path(run_dir), seeds, workers, address
        self.search_args, self.splits, self.device = search_args, splits, device
        self.select_budget, self.select_args, self.command = select_budget, select_args, command
        self.report = report
        self.entries: dict[int, dict] = {}

    def run(self, out: Path | None) -> dict:
        """Run every seed, write leaderboard.json and the winner's genotype; returns the leaderboard."""
        config = self.run_dir / "config.json"
        if config.exists() or (self.run_dir / "leaderboard.json").exists():
            raise InputError(f"{self.run_dir}: already holds a run; choose another --run-dir")
        atomic_write_json(
            config,
            {
                "seeds": self.seeds,
                "workers": self.workers,
                "search_args": self.search_args,
                "device": self.device,
                "select_budget": self.select_budget,
                "select_args": self.select_args,
                "command": self.command,
            },
        )
        self.report(f"run directory: {self.run_dir} ({len(self.seeds)} seeds, {self.workers} at a time)")

        def starting(job: Job) -> None:
            self.report(f"seed {job.key}: searching, then retraining its cell for {self.select_budget:g} min")

        for outcome in run_jobs([self._job(seed) for seed in self.seeds], self.workers, self.address, starting):
            entry = self._entry(outcome)
            self.entries[entry["seed"]] = entry
            self._write_leaderboard()
            if entry["status"] == "ok":
                self.report(
                    f"seed {entry['seed']}: search valid ppl {entry['search_valid_ppl']:.1f}, retrained "
                    f"valid ppl {entry['retrain_valid_ppl']:.2f}"
                )
            else:
                self.report(
                    f"seed {entry['seed']}: failed in {entry['failed_stage']} (exit {entry['exit_code']}): "
                    f"{entry['error']}"
                )
        board = self._write_leaderboard()
        if board["winner"] is None:
            raise InputError(f"every seed failed; see {self.run_dir / 'leaderboard.json'} and the seed-*/*.log files")
        best = next(e for e in board["entries"] if e["seed"] == board["winner"])
        genotype = load(Path(best["run_dir"]) / "search" / "genotype.json")
        genotype.provenance["selection"] = {
            "seeds": self.seeds,
            "retrain_valid_ppl": best["retrain_valid_ppl"],
            "select_budget": self.select_budget,
            "leaderboard": str(self.run_dir / "leaderboard.json"),
        }
        for target in {self.run_dir / "genotype.json", *([Path(out)] if out else [])}:
            save(genotype, target)
        return board

    def _job(self, seed: int) -> Job:
        """A seed's search, then the retraining of the cell it writes; on Ray with `cuda`, on 1/--seeds-per-gpu of a
        GPU.
        """
        home = self.run_dir / f"seed-{seed}"
        search, retrain = home / "search", home / "retrain"
        device = "cuda" if self.device.startswith("cuda") and on_ray(self.workers, self.address) else self.device
        return Job(
            str(seed),
            [
                Step(
                    "nas.cli.search_lm",
                    [*self.search_args, "--seed", str(seed), "--device", device, "--run-dir", str(search)],
                    home / "search.log",
                ),
                Step(
                    "nas.cli.train_lm",
                    [
                        "--cell",
                        str(search / "genotype.json"),
                        "--train",
                        self.splits["train"],
                        "--valid",
                        self.splits["valid"],
                        "--test",
                        self.splits["test"],
                        "--device",
                        device,
                        "--time-budget",
                        str(self.select_budget),
                        "--test-batch-size",
                        "10",
                        *self.select_args,
                        "--run-dir",
                        str(retrain),
                    ],
                    home / "retrain.log",
                ),
            ],
            gpus=1.0 / self.seeds_per_gpu if device.startswith("cuda") else 0.0,
        )

    def _entry(self, outcome: Outcome) -> dict:
        """A finished seed: status ok with both perplexities, or the failed stage, its exit code and last error line."""
        seed = int(outcome.key)
        home = self.run_dir / f"seed-{seed}"
        entry = {
            "seed": seed,
            "status": "failed",
            "search_valid_ppl": None,
            "retrain_valid_ppl": None,
            "genotype": None,
            "run_dir": str(home),
        }
        try:
            if outcome.failed_step == 0:
                return {
                    **entry,
                    "failed_stage": "search",
                    "exit_code": outcome.code,
                    "error": last_error(home / "search.log"),
                }
            metrics = read_json(home / "search" / "metrics.json")
            entry.update(search_valid_ppl=metrics["search_valid_ppl"], genotype=metrics["genotype"])
            if outcome.failed_step == 1:
                return {
                    **entry,
                    "failed_stage": "retrain",
                    "exit_code": outcome.code,
                    "error": last_error(home / "retrain.log"),
                }
            return {
                **entry,
                "status": "ok",
                "retrain_valid_ppl": read_json(home / "retrain" / "metrics.json")["best_valid_ppl"],
            }
        except (InputError, OSError, KeyError) as err:  # unreadable results fail this seed only
            return {**entry, "failed_stage": "results", "exit_code": None, "error": str(err)[:500]}

    def _write_leaderboard(self) -> dict:
        board = leaderboard(list(self.entries.values()), self.seeds, self.select_budget)
        atomic_write_json(self.run_dir / "leaderboard.json", board)
        return board


def leaderboard(entries: list[dict], seeds: list[int], select_budget: float) -> dict:
    """Finished seeds, best retrained validation perplexity first, failed ones last; the winner's seed."""
    ok = sorted((e for e in entries if e["status"] == "ok"), key=lambda e: e["retrain_valid_ppl"])
    failed = sorted((e for e in entries if e["status"] != "ok"), key=lambda e: e["seed"])
    done = {e["seed"] for e in entries}
    return {
        "winner": ok[0]["seed"] if ok else None,
        "ranked_by": "retrain_valid_ppl",
        "select_budget": select_budget,
        "pending": [s for s in seeds if s not in done],
        "entries": ok + failed,
    }
