"""The transfer benchmark (`bin/transfer`): every cell on every corpus for several seeds, against the LSTM.

Each run is an ordinary `bin/train-tagger` run directory, RUN_DIR/CORPUS/CELL/seed-S (its log,
train-tagger.log, inside), launched as a child process. A run is finished when its metrics.json
exists; a benchmark started again on the same RUN_DIR skips finished runs and starts unfinished
ones afresh. RUN_DIR/transfer-plan.json keeps the settings, so a resume with other settings is
refused; cells, corpora and seeds may be added.

Sizes (`sizes`): `params` (the default) gives every cell the hidden size at which its recurrent
layer has the parameter count of flair's BiLSTM at `hidden_size` (`bin/train-tagger --match-params
lstm:H`), and the LSTM runs at `hidden_size`: every model is compared with one fixed reference
rather than the LSTM chasing each cell. `hidden` runs them all at `hidden_size`. A `time_budget`
(minutes per run) adds equal wall-clock time to either.

The report: per corpus and cell, the hidden size, the recurrent layer's parameters, epochs
reached, seconds per training epoch, dev and test F1 (mean ± sample std over seeds; one seed says
so); then the headline, the test over training runs (`tagger.significance.seed_level_test`: Almost
Stochastic Order on the runs' test F1, both ways, with the mean per-seed difference as the effect
size and the paired t-test of `nas.common.stats` beside it) of each cell against the LSTM, and
against the random cells' mean F1 of each seed (`random_cells`), over the seeds both finished,
and, with several random cells, against every run of theirs, unpaired (a run of a cell drawn at random);
then, as per-seed detail, the paired bootstrap over test sentences (`tagger.significance`, from
each run's test.conll) of each seed's pair of trained models (transfer.json also keeps it with
the seeds pooled); as Markdown, JSON, and a plot of dev F1 by epoch (mean over seeds).

The runs of one corpus share RUN_DIR/charlm-states/CORPUS (`train-tagger --charlm-states`): the
frozen character LMs' states of its sentences, computed by the first run and read by the others.
"""

from __future__ import annotations

import io
import math
import shutil
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from nas.common.errors import InputError
from nas.common.files import atomic_write_bytes, atomic_write_json, atomic_write_text, read_json
from nas.common.stats import mean_std, paired_t_test
from nas.common.grid import Job, Step, check_workers, run_jobs
from nas.common.ranges import AT_LEAST_1, NON_NEGATIVE, NON_NEGATIVE_INT, Range, field_value
from nas.common.subprocesses import last_error

from . import significance
from .corpus_formats import FORMATS

CORPUS_FORMATS = (*FORMATS, "column")
LSTM = "lstm"
# train-tagger flags the benchmark sets for each run itself
OWN_FLAGS = (
    "--cell",
    "--corpus",
    "--data",
    "--seed",
    "--runs",
    "--out",
    "--run-dir",
    "--hidden-size",
    "--match-params",
    "--time-budget",
    "--threads",
    "--dry-run",
)


@dataclass(frozen=True)
class Cell:
    name: str  # the label in the table and the directory: a shipped name, or a file's stem
    spec: str  # as given to train-tagger --cell


@dataclass(frozen=True)
class Corpus:
    name: str
    format: str
    path: str


def parse_cells(text: str) -> list[Cell]:
    """`darts_v2,enas,FILE,lstm`: shipped names, genotype files (named by their stem) and lstm."""
    specs = [part.strip() for part in text.split(",") if part.strip()]
    cells = [Cell(LSTM if s.lower() == LSTM else Path(s).stem if s.lower().endswith(".json") else s, s) for s in specs]
    if not cells:
        raise InputError("--cells: no cell given")
    _unique("--cells", [c.name for c in cells])
    return cells


def parse_corpora(text: str) -> list[Corpus]:
    """`[NAME=]FORMAT:PATH,...`; NAME defaults to FORMAT (train-tagger's --corpus FORMAT --data PATH)."""
    corpora = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, rest = item.rpartition("=") if "=" in item.split(":", 1)[0] else ("", "", item)
        form, sep, path = rest.partition(":")
        if not sep or not path or form not in CORPUS_FORMATS:
            raise InputError(
                f"--corpora {item}: expected [NAME=]FORMAT:PATH with FORMAT one of "
                f"{', '.join(CORPUS_FORMATS)}, e.g. conll2000:data/conll2000"
            )
        corpora.append(Corpus(name or form, form, path))
    if not corpora:
        raise InputError("--corpora: no corpus given")
    _unique("--corpora", [c.name for c in corpora], " (name them: NAME=FORMAT:PATH)")
    return corpora


def _unique(flag: str, names: list[str], hint: str = "") -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"{flag}: {', '.join(repeated)} given twice{hint}")


def check_passed_args(args: list[str]) -> None:
    """The train-tagger arguments after `--` may not set what the benchmark sets per run."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in OWN_FLAGS:
            raise InputError(
                f"{flag}: bin/transfer sets it for each run; give bin/transfer's own flags "
                "(--cells, --corpora, --seeds, --hidden-size, --time-budget, --threads, --run-dir) instead"
            )


@dataclass(frozen=True)
class Run:
    cell: Cell
    corpus: Corpus
    seed: int
    path: Path

    @property
    def finished(self) -> bool:
        return (self.path / "metrics.json").is_file()

    def label(self) -> str:
        return f"{self.cell.name} on {self.corpus.name}, seed {self.seed}"


class Benchmark:
    """The runs of one benchmark in `run_dir`; `tagger_args` go to every train-tagger run."""

    def __init__(
        self,
        run_dir: Path,
        cells: list[Cell],
        corpora: list[Corpus],
        seeds: int,
        hidden_size: int,
        sizes: str = "params",
        time_budget: float | None = None,
        tagger_args: tuple[str, ...] = (),
        threads: int | None = None,
        random_cells: tuple[str, ...] = (),
        report: Callable[[str], None] = lambda line: None,
    ):
        if seeds < 1:
            raise InputError(f"--seeds: must be at least 1, got {seeds}")
        if hidden_size < 1:
            raise InputError(f"--hidden-size: must be at least 1, got {hidden_size}")
        if time_budget is not None and not time_budget > 0:
            raise InputError(f"--time-budget: must be a positive number of minutes, got {time_budget}")
        check_passed_args(list(tagger_args))
        unknown = [name for name in random_cells if name not in {c.name for c in cells} or name == LSTM]
        if unknown:
            raise InputError(f"--random-cells {','.join(unknown)}: not among --cells (the LSTM cannot be one)")
        self.random_cells = tuple(random_cells)
        self.run_dir, self.cells, self.corpora, self.seeds = Path(run_dir), cells, corpora, list(range(1, seeds + 1))
        self.hidden_size, self.sizes, self.time_budget, self.tagger_args = hidden_size, sizes, time_budget, tagger_args
        self.threads, self.report = threads, report  # threads: of each run; a resume may change them
        self.runs = [
            Run(cell, corpus, seed, self.run_dir / corpus.name / cell.name / f"seed-{seed}")
            for corpus in corpora
            for cell in cells
            for seed in self.seeds
        ]
        # a finished run's test predictions and a bootstrap of finished runs never change: the report,
        # rewritten as each run finishes, reads and resamples each once
        self._predictions: dict[Path, tuple[list, np.ndarray]] = {}
        self._tests: dict[tuple, dict] = {}

    # -- running ---------------------------------------------------------------------------------

    def run(self, tagger_params: Callable[[list[str]], dict], workers: int = 1, address: str | None = None) -> None:
        """Train every unfinished run, up to `workers` at once (on Ray when more than one, or at `address`:
        `nas.common.grid`), rewriting the report as each finishes. A failed run keeps only its log and
        does not stop the others; at the end they are an InputError that names them. `tagger_params`: the
        parameters train-tagger takes from a run's arguments (`check_inputs`)."""
        self.check_inputs(tagger_params)
        self._check_plan()
        check_workers(workers, address)
        todo = [r for r in self.runs if not r.finished]
        at_once = f", {workers} at a time" if workers > 1 else ""
        where = f" on the Ray cluster at {address}" if address else ""
        self.report(
            f"run directory: {self.run_dir}: {len(self.runs)} runs, {len(self.runs) - len(todo)} finished "
            f"before, {len(todo)} to train{at_once}{where}"
        )
        for run in todo:
            if run.path.exists():  # started before and interrupted: train-tagger begins in an empty directory
                shutil.rmtree(run.path)
                self.report(f"{run.label()}: unfinished before, starting it again")
            run.path.mkdir(parents=True)
        runs = {str(run.path): run for run in todo}
        gpus = 1.0 if _device(self.tagger_args).startswith("cuda") else 0.0
        jobs = [
            Job(key, [Step("tagger.cli.train_tagger", self.tagger_argv(run), run.path / "train-tagger.log")], gpus)
            for key, run in runs.items()
        ]
        failures = []
        outcomes = run_jobs(
            jobs, workers, address, on_start=lambda job: self.report(f"{runs[job.key].label()}: training")
        )
        for k, outcome in enumerate(outcomes, 1):
            run = runs[outcome.key]
            log = run.path / "train-tagger.log"
            if outcome.code != 0 or not run.finished:
                _keep_only(run.path, log)
                failures.append(
                    f"{run.label()}: bin/train-tagger failed (exit {outcome.code}): {last_error(log)} (log: {log})"
                )
                self.report(f"[{k}/{len(todo)}] {failures[-1]}")
                continue
            atomic_write_json(
                run.path / "worker.json",
                {"node": outcome.node, "host": outcome.host, "started": outcome.started, "ended": outcome.ended},
            )
            metrics = _run_figures(run.path / "metrics.json")
            self.report(
                f"[{k}/{len(todo)}] {run.label()}: test F1 {100 * metrics['test_f1']:.2f} after "
                f"{metrics['epochs']} epochs"
            )
            self.write_report()
        if failures:
            raise InputError(
                f"{len(failures)} of {len(todo)} runs failed, the others finished; {failures[0]}; "
                "run the same command again to train the failed runs"
            )

    def check_inputs(self, tagger_params: Callable[[list[str]], dict]) -> None:
        """Every cell file, every corpus and the train-tagger flags after `--`, before the first run
        starts: a bad last cell or flag would otherwise fail after the others had trained. `tagger_params`:
        the parameters train-tagger takes from a run's arguments, checked by its flags (the command's
        `nas.common.cli.passed_on`)."""
        from nas.cells.genotype import load

        from .corpora import load_corpus, parse_columns
        from .embeddings import check_files

        for cell in self.cells:
            if cell.name != LSTM:
                load(cell.spec)
        for run in self.runs:  # the finished runs' figures, which the report reads
            if run.finished:
                _run_figures(run.path / "metrics.json")
        for corpus in self.corpora:
            argv = self.tagger_argv(next(r for r in self.runs if r.corpus == corpus))
            params = tagger_params(argv)
            check_files(params["embeddings"])
            load_corpus(
                corpus.format,
                corpus.path,
                tag_column=params["tag_column"],
                scheme=params["tag_scheme"],
                columns=parse_columns(params["columns"]) if params["columns"] is not None else None,
            )

    def tagger_argv(self, run: Run) -> list[str]:
        """The train-tagger arguments of one run."""
        if self.sizes == "params" and run.cell.name != LSTM:
            size = ["--match-params", f"lstm:{self.hidden_size}"]
        else:
            size = ["--hidden-size", str(self.hidden_size)]
        budget = ["--time-budget", str(self.time_budget)] if self.time_budget is not None else []
        threads = ["--threads", str(self.threads)] if self.threads is not None else []
        given = any(a == "--charlm-states" or a.startswith("--charlm-states=") for a in self.tagger_args)
        states = [] if given else ["--charlm-states", str(self.run_dir / "charlm-states" / run.corpus.name)]
        return [
            "--cell",
            run.cell.spec,
            "--corpus",
            run.corpus.format,
            "--data",
            run.corpus.path,
            "--seed",
            str(run.seed),
            "--runs",
            "1",
            *size,
            *budget,
            *threads,
            *states,
            *self.tagger_args,
            "--run-dir",
            str(run.path),
        ]

    def _check_plan(self) -> None:
        """Write the settings, or check them against those of the runs already there."""
        plan_file = self.run_dir / "transfer-plan.json"
        shared = {
            "sizes": self.sizes,
            "hidden_size": self.hidden_size,
            "time_budget": self.time_budget,
            "tagger_args": list(self.tagger_args),
        }
        cells = {c.name: c.spec for c in self.cells}
        corpora = {c.name: [c.format, c.path] for c in self.corpora}
        if plan_file.exists():
            plan = read_json(plan_file)
            for key, value in shared.items():
                if plan.get(key) != value:
                    raise InputError(
                        f"{self.run_dir}: its runs were trained with {key} {plan.get(key)!r}, not "
                        f"{value!r}; give the same settings to resume, or another --run-dir"
                    )
            for kind, mine in (("cell", cells), ("corpus", corpora)):
                theirs = plan[kind]
                for name in mine.keys() & theirs.keys():
                    if mine[name] != theirs[name]:
                        raise InputError(
                            f"{self.run_dir}: {kind} {name} was {theirs[name]}, not {mine[name]}; "
                            "name it otherwise, or use another --run-dir"
                        )
            cells, corpora = {**plan["cell"], **cells}, {**plan["corpus"], **corpora}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(plan_file, {**shared, "cell": cells, "corpus": corpora})

    # -- the report ------------------------------------------------------------------------------

    def results(self) -> dict:
        """Per corpus and cell, the summary row; and each finished run's figures."""
        runs = [
            {
                "cell": r.cell.name,
                "corpus": r.corpus.name,
                "seed": r.seed,
                "run_dir": str(r.path),
                **_run_figures(r.path / "metrics.json"),
                "worker": read_json(r.path / "worker.json") if (r.path / "worker.json").is_file() else None,
            }
            for r in self.runs
            if r.finished
        ]
        rows = []
        for corpus in self.corpora:
            mine = [r for r in runs if r["corpus"] == corpus.name]
            lstm = {r["seed"]: r["test_f1"] for r in mine if r["cell"] == LSTM}
            random = self._random_mean(mine)
            # every run of the random cells, when there are several of them: a draw of "a random cell, a seed"
            random_runs = (
                [r["test_f1"] for r in mine if r["cell"] in self.random_cells] if len(self.random_cells) > 1 else None
            )
            counts = self._sentence_counts(corpus)
            for cell in self.cells:
                seeds = [r for r in mine if r["cell"] == cell.name]
                if seeds:
                    compared = cell.name not in (LSTM, *self.random_cells)
                    row = _row(
                        cell.name,
                        corpus.name,
                        seeds,
                        lstm if cell.name != LSTM else None,
                        random if compared else None,
                        random_runs if compared else None,
                    )
                    row["bootstrap"] = self._bootstrap(corpus.name, cell.name, counts)
                    rows.append(row)
        settings = {
            "sizes": self.sizes,
            "hidden_size": self.hidden_size,
            "time_budget": self.time_budget,
            "seeds": self.seeds,
            "tagger_args": list(self.tagger_args),
            "random_cells": list(self.random_cells),
            "cells": [asdict(c) for c in self.cells],
            "corpora": [asdict(c) for c in self.corpora],
        }
        return {"settings": settings, "rows": rows, "runs": runs}

    def _random_mean(self, runs: list[dict]) -> dict[int, float] | None:
        """Seed → the mean test F1 of the random cells, over the seeds every random cell finished
        (None: no random cells)."""
        if not self.random_cells:
            return None
        f1 = {(r["cell"], r["seed"]): r["test_f1"] for r in runs}
        return {
            s: statistics.fmean(f1[(c, s)] for c in self.random_cells)
            for s in self.seeds
            if all((c, s) in f1 for c in self.random_cells)
        }

    def _sentence_counts(self, corpus: Corpus) -> dict[tuple[str, int], np.ndarray]:
        """(cell, seed) → span counts per test sentence, of every finished run of `corpus` that wrote test.conll."""
        counts, gold_of = {}, None
        for run in self.runs:
            path = run.path / "test.conll"
            if run.corpus != corpus or not run.finished or not path.is_file():
                continue
            if path not in self._predictions:
                _, gold, pred = significance.read_predictions(path)
                self._predictions[path] = gold, significance.sentence_counts(gold, pred)
            gold, counted = self._predictions[path]
            if gold_of is None:
                gold_of = (path, gold)
            elif gold != gold_of[1]:
                raise InputError(
                    f"{path}: its gold tags differ from those of {gold_of[0]}; the runs of one "
                    "corpus must be scored on the same test sentences"
                )
            counts[(run.cell.name, run.seed)] = counted
        return counts

    def _bootstrap(self, corpus: str, cell: str, counts: dict[tuple[str, int], np.ndarray]) -> dict:
        """The paired bootstrap of `cell` against the LSTM and against the random cells' mean, pooled over
        the seeds all of them finished, and per seed."""
        against = {
            "lstm": [LSTM] if cell != LSTM else [],
            "random": list(self.random_cells) if cell not in self.random_cells and cell != LSTM else [],
        }
        out = {}
        for name, others in against.items():
            seeds = [s for s in self.seeds if all((m, s) in counts for m in (cell, *others))]
            if not others or not seeds:
                out[name] = None
                continue

            def test(chosen: list[int]) -> dict:
                key = (corpus, cell, tuple(others), tuple(chosen))
                if key not in self._tests:
                    stacked = {m: np.stack([counts[(m, s)] for s in chosen]) for m in (cell, *others)}
                    result = significance.paired_bootstrap(stacked[cell], [stacked[m] for m in others])
                    self._tests[key] = asdict(result)
                return self._tests[key]

            out[name] = {
                "against": others,
                "seeds": seeds,
                "pooled": test(seeds),
                "per_seed": {str(s): test([s]) for s in seeds},
            }
        return out

    def write_report(self) -> tuple[dict, str]:
        """RUN_DIR/transfer.json, transfer.md and transfer.png; returns (results, the Markdown table)."""
        results = self.results()
        table = markdown(results["rows"], self.sizes, self.hidden_size, self.time_budget)
        atomic_write_json(self.run_dir / "transfer.json", results)
        atomic_write_text(self.run_dir / "transfer.md", table + "\n")
        plot_dev_f1(
            results["runs"], [c.name for c in self.corpora], [c.name for c in self.cells], self.run_dir / "transfer.png"
        )
        return results, table


UNIT = Range(0, 1)  # an F1 score


def _run_figures(path: Path) -> dict:
    """The figures of a finished run's metrics.json the report uses, checked field by field."""
    metrics, where = read_json(path), str(path)
    if not isinstance(metrics, dict):
        raise InputError(f"{where}: not a run's metrics (a JSON object of figures), got {type(metrics).__name__}")
    by_epoch = field_value(metrics, "dev_f1_by_epoch", where, "list", default=[])
    for k, value in enumerate(by_epoch):
        problem = "must be a number, got null" if value is None else UNIT.problem(value)
        if problem:
            raise InputError(f"{where}: field 'dev_f1_by_epoch[{k}]': {problem}")
    return {
        "hidden_size": field_value(metrics, "hidden_size", where, allowed=AT_LEAST_1),
        "rnn_parameters": field_value(metrics, "rnn_parameters", where, allowed=NON_NEGATIVE_INT),
        "epochs": field_value(metrics, "epochs", where, allowed=NON_NEGATIVE_INT),
        "seconds_per_epoch": field_value(metrics, "seconds_per_epoch.train", where, allowed=NON_NEGATIVE),
        "dev_f1": field_value(metrics, "dev.f1", where, allowed=UNIT) if "dev" in metrics else None,
        "test_f1": field_value(metrics, "test.f1", where, allowed=UNIT),
        "dev_f1_by_epoch": by_epoch,
        "stopped": metrics.get("stopped"),
    }


def _row(
    cell: str,
    corpus: str,
    runs: list[dict],
    lstm: dict[int, float] | None,
    random: dict[int, float] | None = None,
    random_runs: list[float] | None = None,
) -> dict:
    """The summary of one cell on one corpus; `lstm` and `random` (seed → test F1: the LSTM's, the
    random cells' mean) pair it with a reference over the seeds both have; `random_runs` (the test F1
    of every run of the random cells) is compared with its runs unpaired."""
    dev = [r["dev_f1"] for r in runs if r["dev_f1"] is not None]
    speeds = [r["seconds_per_epoch"] for r in runs if r["seconds_per_epoch"] is not None]
    return {
        "cell": cell,
        "corpus": corpus,
        "seeds": [r["seed"] for r in runs],
        "hidden_size": runs[0]["hidden_size"],
        "rnn_parameters": runs[0]["rnn_parameters"],
        "epochs": [r["epochs"] for r in runs],
        "seconds_per_epoch": statistics.fmean(speeds) if speeds else None,
        "dev_f1": mean_std(dev) if dev else None,
        "test_f1": mean_std([r["test_f1"] for r in runs]),
        "vs_lstm": _paired(runs, lstm),
        "vs_random": _paired(runs, random),
        "vs_random_runs": _unpaired(runs, random_runs),
    }


def _paired(runs: list[dict], reference: dict[int, float] | None) -> dict | None:
    """The test over training runs of the runs' test F1 against `reference` (seed → F1), over the
    seeds both have: ASO both ways (`significance.seed_level_test`) and the paired t-test."""
    if reference is None:
        return None
    pairs = [(r["test_f1"], reference[r["seed"]]) for r in runs if r["seed"] in reference]
    test = paired_t_test([a for a, _ in pairs], [b for _, b in pairs])
    aso = significance.seed_level_test([a for a, _ in pairs], [b for _, b in pairs])
    differences = [a - b for a, b in pairs]
    # the same difference at every seed (to float rounding) has no spread: the t-test says nothing (not p 0)
    spread = test is not None and max(differences) - min(differences) > 1e-9
    return {
        "seeds": len(pairs),
        "mean_difference": aso.mean_difference,
        "t": test.t if spread and math.isfinite(test.t) else None,  # JSON has no infinity
        "df": test.df if test else None,
        "p": test.p if spread else None,
        "aso": asdict(aso),
    }


def _unpaired(runs: list[dict], reference: list[float] | None) -> dict | None:
    """The test over training runs of the runs' test F1 against every run in `reference`, unpaired:
    ASO both ways and Welch's t-test (scipy's), with the mean difference of the two sets of runs."""
    if reference is None:
        return None
    from scipy.stats import ttest_ind

    mine = [r["test_f1"] for r in runs]
    aso = significance.seed_level_test(mine, reference, paired=False)
    p = None
    if min(len(mine), len(reference)) >= 2:
        with np.errstate(all="ignore"):  # no spread on either side: p is NaN, reported as none
            p = float(ttest_ind(mine, reference, equal_var=False).pvalue)
    return {
        "seeds": len(mine),
        "runs": [len(mine), len(reference)],
        "mean_difference": aso.mean_difference,
        "p": p if p is not None and math.isfinite(p) else None,
        "aso": asdict(aso),
    }


def _pm(stats: dict | None) -> str:
    if stats is None:
        return "n/a"
    if len(stats["runs"]) == 1:  # no spread to give
        return f"{100 * stats['mean']:.2f} (1 seed)"
    return f"{100 * stats['mean']:.2f} ± {100 * stats['std']:.2f}"


def markdown(rows: list[dict], sizes: str, hidden_size: int, time_budget: float | None) -> str:
    """The table, with a line that says how the models were sized; then the test over training runs
    (the headline) and the per-seed bootstrap over test sentences."""
    how = (
        f"every cell's recurrent layer matched to the parameters of flair's BiLSTM at hidden {hidden_size}"
        if sizes == "params"
        else f"every model at hidden {hidden_size}"
    )
    budget = f"; {time_budget:g} minutes per run" if time_budget is not None else ""
    lines = [
        f"Sizes: {how}{budget}. F1 (strict IOB2 spans) mean ± sample std over seeds.",
        "",
        "| corpus | cell | hidden | RNN params | epochs | s/epoch | dev F1 | test F1 | seeds |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        epochs = r["epochs"]
        reached = str(epochs[0]) if len(set(epochs)) == 1 else f"{min(epochs)}–{max(epochs)}"
        speed = f"{r['seconds_per_epoch']:.1f}" if r["seconds_per_epoch"] is not None else "n/a"
        lines.append(
            f"| {r['corpus']} | {r['cell']} | {r['hidden_size']} | {r['rnn_parameters']:,} | {reached} | "
            f"{speed} | {_pm(r['dev_f1'])} | {_pm(r['test_f1'])} | {len(r['seeds'])} |"
        )
    return "\n".join(lines + seed_test_markdown(rows) + bootstrap_markdown(rows))


def seed_test_markdown(rows: list[dict]) -> list[str]:
    """The headline: each cell against the LSTM (and the random cells: their mean per seed, and all their
    runs) over training runs."""
    tests = [
        (r, against, vs)
        for r in rows
        for against, vs in (
            ("lstm", r.get("vs_lstm")),
            ("random cells' mean", r.get("vs_random")),
            ("random cells' runs", r.get("vs_random_runs")),
        )
        if vs is not None
    ]
    if not tests:
        return []
    lines = [
        "",
        "Is the cell better? The test over training runs, which answers it: Almost Stochastic Order "
        f"(deepsig, confidence {significance.ASO_CONFIDENCE:g}, {significance.ASO_ITERATIONS:,} bootstrap "
        f"iterations, seed {significance.ASO_SEED}) on each seed's test F1, both ways: ε_min 0 is dominance, "
        f"1 none; the verdict takes ε_min < {significance.ASO_THRESHOLD:g}. Δ test: the mean over the seeds "
        "both finished of the cell's F1 minus the other's; t-test p: paired, two-sided. One seed gives no test. "
        "Against the random cells' runs (when there are several random cells): the cell's runs against every run "
        "of every random cell, unpaired, so the spread between random cells counts too (seeds: the cell's / "
        "theirs; Δ: the difference of the means; t-test p: Welch's, two-sided).",
        "",
        "| corpus | cell | against | seeds | Δ test F1 | ε_min cell > other | ε_min other > cell | verdict | "
        "t-test p |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r, against, vs in tests:
        aso = vs.get("aso") or {}
        delta = "n/a" if vs["mean_difference"] is None else _signed(vs["mean_difference"])
        counts = vs.get("runs", [vs["seeds"]])
        seeds = " / ".join(map(str, counts))
        if min(counts) < 2:
            say = "1 seed: no test over training runs" if min(counts) == 1 else "no seed both finished"
            lines.append(f"| {r['corpus']} | {r['cell']} | {against} | {seeds} | {delta} | — | — | {say} | — |")
            continue
        verdict = {"better": f"{r['cell']} better", "worse": f"{against} better"}.get(aso["verdict"], "undecided")
        no_p = "n/a (no spread)" if "runs" in vs else "n/a (the same Δ each seed)"
        p = no_p if vs["p"] is None else f"{vs['p']:.3g}"
        lines.append(
            f"| {r['corpus']} | {r['cell']} | {against} | {seeds} | {delta} | "
            f"{aso['epsilon_min']:.2f} | {aso['epsilon_min_reverse']:.2f} | {verdict} | {p} |"
        )
    return lines


def _signed(fraction: float) -> str:
    """A difference in F1 points with its sign; one that rounds to zero is +0.00, never -0.00."""
    text = f"{100 * fraction:+.2f}"
    return "+0.00" if text == "-0.00" else text


def bootstrap_markdown(rows: list[dict]) -> list[str]:
    """The paired bootstrap's lines, per seed (none when no run wrote its test predictions)."""
    tests = [(r, b) for r in rows for b in (r.get("bootstrap") or {}).values() if b is not None]
    if not tests:
        return []
    lines = [
        "",
        f"Per-seed detail: paired bootstrap over test sentences ({significance.SAMPLES:,} resamples, the "
        "same for every model), each seed's trained models held fixed: it sees the test set's luck, not the "
        "seeds' (no answer to \"is the cell better?\"): Δ test F1 of the cell minus the LSTM's, or minus the "
        "mean of the random cells' (their names under \"against\"); the 95% interval; two-sided p. "
        "transfer.json also has it with the seeds pooled.",
        "",
        "| corpus | cell | against | seed | Δ test F1 | 95% interval | p |",
        "| --- | --- | --- | ---: | ---: | :---: | ---: |",
    ]
    for r, b in tests:
        for seed, d in b["per_seed"].items():
            lines.append(
                f"| {r['corpus']} | {r['cell']} | {', '.join(b['against'])} | {seed} | "
                f"{_signed(d['difference'])} | [{_signed(d['low'])}, {_signed(d['high'])}] | "
                f"{d['p']:.3g} |"
            )
    return lines


def plot_dev_f1(runs: list[dict], corpora: list[str], cells: list[str], path: Path) -> None:
    """One panel per corpus: each cell's dev F1 by epoch, the mean over the seeds that reached the epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(corpora), figsize=(5 * len(corpora), 3.6), squeeze=False)
    for ax, corpus in zip(axes[0], corpora):
        for cell in cells:
            curves = [
                r["dev_f1_by_epoch"]
                for r in runs
                if r["corpus"] == corpus and r["cell"] == cell and r["dev_f1_by_epoch"]
            ]
            if curves:
                mean = [
                    100 * statistics.fmean(c[e] for c in curves if len(c) > e) for e in range(max(map(len, curves)))
                ]
                ax.plot(range(1, len(mean) + 1), mean, marker="o", markersize=3, label=f"{cell} ({len(curves)})")
        ax.set(title=corpus, xlabel="epoch", ylabel="dev F1 (mean over seeds)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no dev F1 (trained on train + dev)", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def _device(args: tuple[str, ...]) -> str:
    """The --device among train-tagger arguments ("cpu" when not given)."""
    for k, arg in enumerate(args):
        if arg == "--device" and k + 1 < len(args):
            return args[k + 1]
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
    return "cpu"


def _keep_only(folder: Path, log: Path) -> None:
    """A failed run's folder keeps the log that says why, nothing half-written (a rerun starts it afresh)."""
    for item in folder.iterdir():
        if item != log:
            shutil.rmtree(item) if item.is_dir() else item.unlink()
