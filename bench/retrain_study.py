"""The retraining study's table and figure, from its `bin/train-lm` run directories (docs/results.md,
"Does search beat chance?").

Every cell was retrained at one budget; the random cells (--random, drawn before any result was
seen) give the yardstick. For each run: parameters, epochs reached, median tokens/s, best validation
perplexity, test perplexity (batch 1), and its distance from the random cells' mean in their sample
standard deviations (z; negative is better). The test a found cell must pass is a one-sided
prediction test: if the cell were one more draw from the random cells' population (normal, mean
and spread unknown), (x - mean) / (s √(1 + 1/n)) would follow Student's t with n - 1 degrees of
freedom; p is the chance of a draw at least this good.

Copies each run's config.json, log.jsonl and metrics.json (never weights) to OUT/NAME/ with this
machine's paths made generic, writes OUT/summary.json, the Markdown table on stdout and the figure.
With --provenance RUN_NAME:CELL_NAME the run's figures go into resources/cells/CELL_NAME.json's
provenance under "retrained".

    python bench/retrain_study.py RUN_DIR... --random random_1 ... --out docs/experiments/retrain \
        --figure docs/figures/retrain-study.png [--provenance darts_search_h64:darts_search_h64 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import matplotlib
from scipy import stats

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from search_study import portable  # noqa: E402  (bench/ is the script's folder, first on sys.path)

FILES = ("config.json", "log.jsonl", "metrics.json")
REPO = Path(__file__).resolve().parent.parent


def read_run(path: Path) -> dict:
    log = [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines() if line.strip()]
    return {
        "name": path.name,
        "path": path,
        "config": json.loads((path / "config.json").read_text()),
        "metrics": json.loads((path / "metrics.json").read_text()),
        "log": log,
    }


def summarise(run: dict, at_epoch: int | None = None) -> dict:
    """A run's row; with `at_epoch`, also its validation perplexity after that epoch (`valid_at_epoch`)."""
    m, c, log = run["metrics"], run["config"], run["log"]
    if at_epoch is not None and (len(log) < at_epoch or log[at_epoch - 1]["batches"] < log[0]["batches"]):
        raise SystemExit(f"error: {run['path']}: no full epoch {at_epoch} in its log.jsonl ({len(log)} epochs)")
    at = {} if at_epoch is None else {"valid_at_epoch": log[at_epoch - 1]["valid_ppl"]}
    return {
        **at,
        "name": run["name"],
        "cell": m["cell"],
        "params": m["params"],
        "layer_params": m["rnn_params"],
        "emsize": c["emsize"],
        "nhid": m["nhid"],
        "epochs": len(log),
        "epochs_done": epochs_done(log),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in log),
        "minutes": round(m["seconds"] / 60, 1),
        "best_valid_ppl": m["best_valid_ppl"],
        "best_epoch": m["best_epoch"],
        "test_ppl": m["test_ppl"],
        "test_batch_size": m["test_batch_size"],
        "valid_curve": [r["valid_ppl"] for r in log],
    }


def epochs_done(log: list[dict]) -> float:
    """Epochs trained, the last (cut by the time budget) counted by its share of the first epoch's batches."""
    return round(len(log) - 1 + min(1.0, log[-1]["batches"] / log[0]["batches"]), 2)


def against_random(rows: list[dict], random: list[str]) -> dict:
    """Adds z and the prediction test's p to every row (in place); returns the random cells' mean and spread."""
    pool = [r for r in rows if r["name"] in random]
    if len(pool) < 2:
        raise SystemExit(f"error: --random names {len(pool)} of the runs given; the yardstick needs at least 2")
    ref = {}
    for key in ("best_valid_ppl", "test_ppl", "valid_at_epoch")[: 3 if "valid_at_epoch" in rows[0] else 2]:
        values = [r[key] for r in pool]
        mean, sd, n = statistics.mean(values), statistics.stdev(values), len(values)
        ref[key] = {"mean": mean, "sd": sd, "n": n}
        for r in rows:
            r[f"z_{key}"] = (r[key] - mean) / sd
            r[f"p_{key}"] = (
                None
                if r["name"] in random
                else float(stats.t.cdf((r[key] - mean) / (sd * (1 + 1 / n) ** 0.5), df=n - 1))
            )
    return ref


def table(rows: list[dict], ref: dict, at_epoch: int | None = None) -> str:
    if at_epoch is not None:  # equal training tokens: every run's validation after the same full epoch
        lines = [
            f"| cell | epochs | valid ppl after epoch {at_epoch} | z | p (beats a random cell) | best valid ppl "
            "| test ppl |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in rows:
            p = "—" if r["p_valid_at_epoch"] is None else f"{r['p_valid_at_epoch']:.2f}"
            lines.append(
                f"| {r['name']} | {r['epochs_done']:.2f} | {r['valid_at_epoch']:.1f} | "
                f"{r['z_valid_at_epoch']:+.2f} | {p} | {r['best_valid_ppl']:.1f} | {r['test_ppl']:.1f} |"
            )
        e = ref["valid_at_epoch"]
        lines.append(f"| {e['n']} random cells, mean ± sd | | {e['mean']:.1f} ± {e['sd']:.1f} | 0 | | | |")
        return "\n".join(lines)
    lines = [
        "| cell | parameters (layer) | epochs | tokens/s (median) | best valid ppl | test ppl | z valid | z test "
        "| p (beats a random cell) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        epochs = f"{r['epochs_done']:.2f}"
        p = "—" if r["p_test_ppl"] is None else f"{r['p_test_ppl']:.2f}"
        lines.append(
            f"| {r['name']} | {r['params']:,} ({r['layer_params']:,}) | {epochs} | {r['tokens_per_s']:,.0f} | "
            f"{r['best_valid_ppl']:.1f} | {r['test_ppl']:.1f} | {r['z_best_valid_ppl']:+.2f} | "
            f"{r['z_test_ppl']:+.2f} | {p} |"
        )
    v, t = ref["best_valid_ppl"], ref["test_ppl"]
    lines.append(
        f"| {v['n']} random cells, mean ± sd | | | | {v['mean']:.1f} ± {v['sd']:.1f} | "
        f"{t['mean']:.1f} ± {t['sd']:.1f} | 0 | 0 | |"
    )
    return "\n".join(lines)


def figure(rows: list[dict], ref: dict, random: list[str], path: Path) -> None:
    """Left: each cell's test perplexity against the random cells' mean ± 1 and 2 sd. Right: validation curves."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1.1, 1]})
    order = sorted(rows, key=lambda r: r["test_ppl"])
    t = ref["test_ppl"]
    for k, alpha in ((2, 0.12), (1, 0.22)):
        left.axvspan(t["mean"] - k * t["sd"], t["mean"] + k * t["sd"], color="grey", alpha=alpha, lw=0)
    left.axvline(t["mean"], color="grey", lw=1)
    for i, r in enumerate(order):
        left.plot(r["test_ppl"], i, "o", color="grey" if r["name"] in random else "C0")
    left.set_yticks(range(len(order)), [r["name"] for r in order], fontsize=7)
    left.invert_yaxis()
    left.set(xlabel="test perplexity (batch 1)", title="retrained: random cells' mean ± 1, 2 sd in grey")
    for r in rows:
        style = dict(color="grey", lw=0.8) if r["name"] in random else dict(lw=1.3, label=r["name"])
        right.plot(range(1, len(r["valid_curve"]) + 1), r["valid_curve"], marker="o", ms=2, **style)
    right.set(
        xlabel="epoch (the last cut by the budget)",
        ylabel="validation perplexity",
        yscale="log",
        title="validation perplexity (random cells grey)",
    )
    right.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def record_provenance(row: dict, ref: dict, cell_file: Path, run: dict) -> str:
    cell = json.loads(cell_file.read_text())
    cell["provenance"]["retrained"] = {
        "command": portable(run["config"]["command"], run["path"]),
        "emsize": row["emsize"],
        "nhid": row["nhid"],
        "params": row["params"],
        "seed": run["config"]["seed"],
        "budget_minutes": run["config"]["time_budget"],
        "epochs": row["epochs_done"],
        "best_valid_ppl": round(row["best_valid_ppl"], 2),
        "test_ppl": round(row["test_ppl"], 2),
        "test_batch_size": row["test_batch_size"],
        "random_cells_test_ppl": {
            "mean": round(ref["test_ppl"]["mean"], 2),
            "sd": round(ref["test_ppl"]["sd"], 2),
            "n": ref["test_ppl"]["n"],
        },
        "z_test_ppl": round(row["z_test_ppl"], 2),
        "p_beats_random_cell": round(row["p_test_ppl"], 3),
        "study": "docs/results.md, 'Does search beat chance?' (one seed, a CPU budget)",
    }
    cell_file.write_text(json.dumps(cell, indent=2) + "\n")
    return f"{cell_file.name}: retrained figures recorded (test {row['test_ppl']:.1f}, z {row['z_test_ppl']:+.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument(
        "--random",
        action="append",
        required=True,
        metavar="RUN_NAME",
        help="A run of a random cell: the yardstick (repeatable, at least 2).",
    )
    parser.add_argument("--out", type=Path, required=True, help="Where the runs' files and summary.json go.")
    parser.add_argument("--figure", type=Path, required=True)
    parser.add_argument(
        "--provenance",
        action="append",
        default=[],
        metavar="RUN_NAME:CELL_NAME",
        help="Record this run's figures in resources/cells/CELL_NAME.json (repeatable).",
    )
    parser.add_argument("--cells", type=Path, default=Path("resources/cells"))
    parser.add_argument(
        "--at-epoch",
        type=int,
        help="Compare every run's validation perplexity after this full "
        "epoch (equal training tokens, for runs whose time budgets bought different epochs).",
    )
    args = parser.parse_args()
    runs = [read_run(path) for path in args.runs]
    rows = [summarise(run, args.at_epoch) for run in runs]
    ref = against_random(rows, args.random)
    for path in args.runs:
        (args.out / path.name).mkdir(parents=True, exist_ok=True)
        for name in FILES:
            text = portable((path / name).read_text(), path).replace(f"{REPO}/", "")  # the cell files, repo-relative
            (args.out / path.name / name).write_text(text)
    (args.out / "summary.json").write_text(json.dumps({"random_cells": ref, "runs": rows}, indent=1) + "\n")
    figure(rows, ref, args.random, args.figure)
    print(table(rows, ref, args.at_epoch))
    by_name = {run["name"]: run for run in runs}
    for pair in args.provenance:
        run_name, cell_name = pair.split(":")
        row = next(r for r in rows if r["name"] == run_name)
        print(record_provenance(row, ref, args.cells / f"{cell_name}.json", by_name[run_name]), file=sys.stderr)


if __name__ == "__main__":
    main()
