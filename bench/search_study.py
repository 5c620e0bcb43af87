"""The search-health study's table and curves, from its run directories (docs/results.md, "Searches that converge").

Reads each `bin/search-lm` run directory given (config.json, log.jsonl, metrics.json,
genotype.json), copies those four files (never the checkpoint) to OUT/NAME/, and writes
OUT/summary.json, the Markdown table on stdout, and the curves (validation perplexity, MAD and
Hessian eigenvalue per method; ESS joint against intra-only, ESS Fig. 6) to FIGURES/. Minutes are
metrics.json's (every epoch's training and validation over resumes, and the conclusion); for runs
of a toolkit that did not write them, wall-clock from config.json's to metrics.json's modification
time (--minutes for a run resumed after a pause). It also
applies DARTS-ES (`nas.runs.health.EarlyStop`, the paper's k = 5 and ratio 0.75) to each logged
eigenvalue curve, to say where `--early-stop hessian` would have stopped.

With --ship RUN_NAME:CELL_NAME, the run's genotype becomes resources/cells/CELL_NAME.json: its
provenance names the corpus files by name, size and SHA-256 instead of this machine's paths, and
a cell whose search validation perplexity is not below 400 is refused (the bar for a found-here
cell to ship).

    python bench/search_study.py RUN_DIR... --out docs/experiments/search-health --figures docs/figures \
        [--ship darts:darts_ptb ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nas.methods import method_class  # noqa: E402
from nas.runs.health import EarlyStop, alpha_stall, convergence, identity_share  # noqa: E402

FILES = ("config.json", "log.jsonl", "metrics.json", "genotype.json")
EIGEN_SHOWN = 1e3  # an eigenvalue beyond this is a diverging model's (I-DARTS at lr 20: −4e14), not drawn
DIVERGED = (
    1e5  # a validation perplexity above this (10× a uniform guess over PTB's 10k words; NaN too) is a diverged epoch
)


def read_run(path: Path) -> dict:
    config = json.loads((path / "config.json").read_text())
    log = [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines() if line.strip()]
    metrics = json.loads((path / "metrics.json").read_text()) if (path / "metrics.json").is_file() else None
    if metrics and metrics.get("epochs", len(log)) < len(log):
        metrics = None  # a run resumed and not yet finished: its metrics.json is the earlier end's
    if metrics is None and all("seconds" in record for record in log):
        minutes = sum(record["seconds"] for record in log) / 60
    else:
        finished = (path / "metrics.json").stat().st_mtime if metrics else (path / "log.jsonl").stat().st_mtime
        minutes = (metrics or {}).get("minutes", (finished - (path / "config.json").stat().st_mtime) / 60)
    return {"name": path.name, "config": config, "log": log, "metrics": metrics, "minutes": minutes}


def would_stop(log: list[dict]) -> dict | None:
    """Where DARTS-ES would have stopped this search, applied to its logged eigenvalues (None: never)."""
    rule = EarlyStop()
    for record in log:
        if "eigenvalue" not in record:
            return None
        if rule.update(record["eigenvalue"], {}):
            return {"stopped_at": rule.stopped_at, "derive_epoch": rule.derive_epoch}
    return None


def summarise(run: dict) -> dict:
    c, log, metrics = run["config"], run["log"], run["metrics"] or {}
    verdict = convergence(log)  # the rule as it stands, also for runs that ended under an older toolkit
    nodes = metrics.get("genotype", {}).get("nodes") or log[-1]["genotype"]
    eigen = [r["eigenvalue"] for r in log if "eigenvalue" in r]
    method = (
        c["method"]
        + (f" ({c['search_space']})" if c["method"] == "ess" else "")
        + (f", lr {c['lr']:g}" if c["lr"] != 20 else "")
    )
    if c.get("lr_decay", 1) != 1:
        method += f", lr × {c['lr_decay']:g} an epoch from {c['lr_decay_start']}"
    return {
        "name": run["name"],
        "method": method,
        "H": c["nhid"],
        "lr": c["lr"],
        "epochs": len(log),
        "tokens": sum(r.get("tokens", 0) for r in log),
        "minutes": round(run["minutes"], 1),
        "search_valid_ppl": metrics.get("search_valid_ppl"),
        "finished": bool(metrics),
        "converged": verdict["converged"],
        "convergence": verdict,
        "alpha_stall": alpha_stall(log, lambda alpha: method_class(c["method"]).rule.normalise(alpha, c["nodes"])),
        "eigenvalue_first": eigen[0] if eigen else None,
        "eigenvalue_last": eigen[-1] if eigen else None,
        "darts_es": would_stop(log) if eigen else None,
        "identity_share": identity_share(nodes),
        "genotype": nodes,
    }


def table(rows: list[dict]) -> str:
    head = (
        "| method | H | epochs | tokens | minutes | search valid ppl | converged | λmax first → last "
        "| identity share | genotype (op, predecessor per node) |\n| --- | ---: | ---: | ---: | ---: | ---: | --- | "
        "--- | ---: | --- |"
    )
    lines = [head]
    for r in rows:
        ppl = "—" if r["search_valid_ppl"] is None else f"{r['search_valid_ppl']:.1f}"
        eig = "—" if r["eigenvalue_first"] is None else f"{r['eigenvalue_first']:.3g} → {r['eigenvalue_last']:.3g}"
        verdict = "unfinished" if not r["finished"] else "yes" if r["converged"] else "no"
        cell = ", ".join(f"{op} {pred}" for node in r["genotype"] for op, pred in node)
        lines.append(
            f"| {r['method']} | {r['H']} | {r['epochs']} | {r['tokens']:,} | {r['minutes']} | {ppl} | "
            f"{verdict} | {eig} | {r['identity_share']:.2f} | {cell} |"
        )
    return "\n".join(lines)


def curves(runs: list[dict], key: str, ylabel: str, title: str, path: Path, log_scale: bool = False) -> None:
    """One curve per finished run; an epoch whose validation diverged (NaN, or above `DIVERGED`; or an
    eigenvalue of a diverged model) is left out, and the table's text says so."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for run in (r for r in runs if r["metrics"]):
        points = [
            (r["epoch"], r[key])
            for r in run["log"]
            if r.get(key) is not None
            and r[key] == r[key]
            and r["valid_ppl"] < DIVERGED
            and (key != "eigenvalue" or abs(r[key]) < EIGEN_SHOWN)
        ]
        decayed = run["config"].get("lr_decay", 1) != 1  # dashed and beneath, so that a run it continues shows
        if points:
            ax.plot(
                *zip(*points),
                marker=None if decayed else "o",
                ms=3,
                linestyle="--" if decayed else "-",
                zorder=1 if decayed else 2,
                label=run["name"] + (", lr decayed" if decayed and "decay" not in run["name"] else ""),
            )
    if log_scale:
        ax.set_yscale("log")
    if key == "eigenvalue":  # mostly within ±0.1, with swings of ±30 (SDARTS-RS): linear near 0, logarithmic beyond
        ax.set_yscale("symlog", linthresh=0.01)
    ax.set(xlabel="epoch (ESS: round)", ylabel=ylabel, title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


SHIP_BELOW = 400.0  # search validation perplexity a found-here cell must beat to ship
CORPORA = {
    "ptb.train.txt": "Penn Treebank, Mikolov's preprocessed version (ptb/)",
    "wiki.train.tokens": "WikiText-2, tokenized (wikitext-2/)",
}


def portable(text: str, run: Path) -> str:
    """`text` with this machine's paths made generic: the corpus folder as data/NAME, the study's folder as runs."""
    text = re.sub(
        r'[^\s"]*/(data/[^/\s"]+)/', r"\1/", text
    )  # ../shared/data/ptb/x, /abs/shared/data/ptb/x → data/ptb/x
    text = re.sub(r'--data [^\s"]*/(data/[^/\s"]+)', r"--data \1", text)
    # Only whole folder prefixes: a run named relative to the working directory has parent ".", which must not
    # turn every "." of the text (decimals included) into "runs".
    for parent in sorted({str(run.resolve().parent), str(run.parent)} - {"."}, key=len, reverse=True):
        text = re.sub(rf'(?<![^\s"=]){re.escape(parent)}/', "runs/", text)
    return text


def replay_command(command: str, settings: dict, epochs_run: int, run_name: str) -> str:
    """The command that reproduces a run: its start, and for a run resumed with a larger budget the resume
    that ran the rest (it ends as if run at once). A run that stopped before its budget (`--early-stop`, a
    time budget) is reproduced by its start alone."""
    started = re.search(r"--(epochs|rounds) (\d+)", command)
    if not started or int(started.group(2)) >= epochs_run:
        return command
    flags = f"--{started.group(1)} {epochs_run}"
    rollbacks_added = bool(settings.get("max_rollbacks")) and "--max-rollbacks" not in command
    if rollbacks_added:
        flags += f" --max-rollbacks {settings['max_rollbacks']}"
    if settings.get("lr_decay", 1) != 1 and "--lr-decay" not in command:  # a decay a resume set
        flags += f" --lr-decay {settings['lr_decay']:g} --lr-decay-start {settings['lr_decay_start']}"
    joiner = ";" if rollbacks_added else " &&"  # rollbacks added on resume: the start gave up on a non-finite step
    return f"{command}{joiner} bin/search-lm --resume runs/{run_name} {flags}"


def ship(run: Path, name: str, cells: Path, summary: dict) -> str:
    """Write run's genotype as cells/NAME.json with portable provenance and its budget in words; says what it did."""
    cell = json.loads((run / "genotype.json").read_text())
    prov = cell["provenance"]
    c = prov["settings"]
    if prov["search_valid_ppl"] is None or prov["search_valid_ppl"] >= SHIP_BELOW:
        return (
            f"{name}: not shipped, search validation perplexity {prov['search_valid_ppl']} is not below {SHIP_BELOW:g}"
        )
    prov["health"]["convergence"] = summary["convergence"]
    unit = "rounds" if c["method"] == "ess" else "epochs"
    prov["budget"] = (
        f"{summary['method']} on PTB: {summary['epochs']} {unit} ({summary['tokens']:,} training tokens), "
        f"emsize = nhid = {c['nhid']}, batch {c['batch_size']}, bptt {c['bptt']}, {c['nodes']} nodes, "
        f"seed {c['seed']}; {summary['minutes']} min with one thread on one of 2 CPU cores (a second "
        "search on the other); converged by the toolkit's rule: "
        f"{'yes' if summary['converged'] else 'no'}. A CPU-budget cell, not a paper-scale search."
    )
    files = {split: Path(path) for split, path in prov["data"].items()}
    prov["data"] = {
        "corpus": CORPORA.get(files["train"].name, files["train"].parent.name),
        **{
            split: {
                "file": path.name,
                "bytes": path.stat().st_size,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
            for split, path in files.items()
        },
    }
    prov["command"] = replay_command(portable(prov["command"], run), c, prov["epochs_run"], run.name)
    prov.pop("run_dir", None)
    cell["name"] = name
    (cells / f"{name}.json").write_text(json.dumps(cell, indent=2) + "\n")
    return f"{name}: shipped from {run.name} (search validation perplexity {prov['search_valid_ppl']:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="Where the runs' files and summary.json go.")
    parser.add_argument("--figures", type=Path, required=True, help="Where the curves go (search-health-*.png).")
    parser.add_argument(
        "--ship",
        action="append",
        default=[],
        metavar="RUN_NAME:CELL_NAME",
        help="Ship this run's genotype as resources/cells/CELL_NAME.json (repeatable).",
    )
    parser.add_argument("--cells", type=Path, default=Path("resources/cells"))
    parser.add_argument(
        "--minutes",
        action="append",
        default=[],
        metavar="RUN_NAME=MINUTES",
        help="A run's wall-clock minutes, for a run resumed after a pause (its files' times then mislead).",
    )
    args = parser.parse_args()
    runs = [read_run(path) for path in args.runs]
    for pair in args.minutes:
        name, minutes = pair.split("=")
        next(run for run in runs if run["name"] == name)["minutes"] = float(minutes)
    rows = [summarise(run) for run in runs]
    for path in args.runs:
        (args.out / path.name).mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if (path / name).is_file():
                (args.out / path.name / name).write_text(portable((path / name).read_text(), path))
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    args.figures.mkdir(parents=True, exist_ok=True)
    stem = args.figures / "search-health"
    curves(
        runs,
        "valid_ppl",
        "search validation perplexity",
        "search validation perplexity",
        Path(f"{stem}-valid-ppl.png"),
        True,
    )
    curves(
        [r for r in runs if any("mad" in x for x in r["log"])],
        "mad",
        "MAD from uniform (intra)",
        "α moving away from uniform",
        Path(f"{stem}-mad.png"),
    )
    for run in runs:  # the identity op's share of the cell derived at each epoch: the collapse, epoch by epoch
        for record in run["log"]:
            if "cell_share" in record:
                record["identity_share"] = record["cell_share"].get("identity", 0.0)
    curves(
        [r for r in runs if any("identity_share" in x for x in r["log"])],
        "identity_share",
        "identity's share of the derived cell",
        "the collapse to identity edges",
        Path(f"{stem}-identity.png"),
    )
    curves(
        [r for r in runs if any("eigenvalue" in x for x in r["log"])],
        "eigenvalue",
        "λmax of ∇²α L_valid",
        "Hessian eigenvalue",
        Path(f"{stem}-eigenvalue.png"),
    )
    ess = [r for r in runs if r["config"]["method"] == "ess"]
    if ess:
        curves(
            ess,
            "mad",
            "MAD from uniform (intra)",
            "ESS joint against intra-only (ESS Fig. 6)",
            Path(f"{stem}-ess-mad.png"),
        )
    print(table(rows))
    by_name = {path.name: path for path in args.runs}
    for pair in args.ship:
        run_name, cell_name = pair.split(":")
        print(
            ship(by_name[run_name], cell_name, args.cells, next(r for r in rows if r["name"] == run_name)),
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
