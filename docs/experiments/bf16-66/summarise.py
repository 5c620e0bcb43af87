"""The bf16 study's table (run.sh): per task and precision, each seed's speed and quality at equal steps, and
bf16's speed ratio against fp32 (medians over the seeds). Reads OUT (run.sh's) and prints Markdown rows."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bf16-66")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def search(run: Path) -> tuple[float, float]:
    log = lines(run / "log.jsonl")
    return sum(r["tokens"] for r in log) / sum(r["seconds"] for r in log), log[-1]["valid_ppl"]


def lm(run: Path) -> tuple[float, float]:
    log = [r for r in lines(run / "log.jsonl") if "tokens_per_s" in r]
    return statistics.median(r["tokens_per_s"] for r in log), log[-1]["valid_ppl"]


def tagger(run: Path) -> tuple[float, float]:
    metrics = json.loads((run / "metrics.json").read_text())
    return statistics.median(metrics["seconds_per_epoch"]["each_train"]), metrics["test"]["f1"]


TASKS = {
    "search": (search, "tok/s", "valid ppl"),
    "lm": (lm, "tok/s", "valid ppl"),
    "tagger": (tagger, "s/epoch", "test F1"),
}
for task, (read, speed, quality) in TASKS.items():
    got = {}
    for precision in ("fp32", "bf16"):
        for seed in (1, 2):
            run = out / f"{task}-{precision}-s{seed}"
            try:
                got[(precision, seed)] = read(run)
            except (OSError, KeyError, ValueError, IndexError) as error:
                print(f"| {task} | {precision} | seed {seed} | missing ({error}) |")
    for precision in ("fp32", "bf16"):
        rows = [got[(precision, s)] for s in (1, 2) if (precision, s) in got]
        print(
            f"| {task} | {precision} | {speed}: {', '.join(f'{r[0]:.4g}' for r in rows)} | {quality}: "
            f"{', '.join(f'{r[1]:.4g}' for r in rows)} |"
        )
    both = [s for s in (1, 2) if ("fp32", s) in got and ("bf16", s) in got]
    if both:
        ratio = [got[("bf16", s)][0] / got[("fp32", s)][0] for s in both]
        faster = [r if speed == "tok/s" else 1 / r for r in ratio]  # s/epoch: time, so its inverse
        seeds = ", ".join(map(str, both))
        print(f"| {task} | bf16 ÷ fp32 | speed {', '.join(f'{r:.2f}×' for r in faster)} (seeds {seeds}) | |")
