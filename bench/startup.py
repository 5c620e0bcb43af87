#!/usr/bin/env python3
"""Start-up of `bin/tag`: seconds from the command's start to its first tagged line, and of `--help`.

Builds (or reuses, with --work) the untrained GloVe and GloVe + pooled-Flair taggers of
bench/tag_throughput.py (GloVe 6B 50d; two small character LMs trained here for one epoch), writes
a short text, and runs each variant --repeats times, interleaved, every process pinned to --core
with one torch thread:

    help           bin/tag --help, to its exit
    now            bin/tag --model MODEL text.txt, to the first line on stdout (and to its exit)
    full_import    the same with NAS_TAGGER_FULL_IMPORT=1: flair imported with transformers,
                   scikit-learn, SciPy, boto3 and matplotlib (tagger.light_import switched off)
    before         with --before CHECKOUT: that checkout's bin/tag (e.g. `git archive` of an
                   older commit), for before/after

Prints one JSON line: median seconds per variant and model, the load average at start and end
(the machine may be shared: say how busy it was), the core and the Python and torch versions.

    bench/startup.py --repeats 5 --core 1 --work /tmp/startup
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("glove", "glove+pooled")


def loadavg() -> list[str]:
    return open("/proc/loadavg").read().split()[:3]


def timed(command: list[str], env: dict, core: int) -> tuple[float, float]:
    """(seconds to the first stdout line, seconds to the exit) of `command` pinned to `core`."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )
    first = proc.stdout.readline()
    first_s = time.perf_counter() - start
    rest, err = proc.communicate()
    total_s = time.perf_counter() - start
    if proc.returncode != 0 or not first:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{err.decode(errors='replace')[-2000:]}")
    return first_s, total_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--core", type=int, default=0, help="the CPU core every command is pinned to")
    parser.add_argument("--sentences", type=int, default=20, help="sentences in the text tagged")
    parser.add_argument("--before", type=Path, help="another checkout whose bin/tag is timed too")
    parser.add_argument("--work", help="keep the models and the text here (reused) [default: a temp dir]")
    parser.add_argument("--models", default=",".join(MODELS), help="of glove, glove+pooled, comma-separated")
    args = parser.parse_args()
    record = {"bench": "startup", "loadavg_start": loadavg(), "core": args.core, "repeats": args.repeats}
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from tag_throughput import build_models, write_text

    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        work = Path(args.work or scratch)
        work.mkdir(parents=True, exist_ok=True)
        text = work / "text.txt"
        write_text(text, args.sentences, 1)
        settings = argparse.Namespace(cell="darts_v2", hidden_size=256, charlm=None, charlm_epochs=1, seed=1)
        models = build_models(work, settings)
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env.pop("NAS_TAGGER_FULL_IMPORT", None)
        checkouts = {"now": (ROOT, env), "full_import": (ROOT, dict(env, NAS_TAGGER_FULL_IMPORT="1"))}
        if args.before:
            checkouts["before"] = (args.before.resolve(), env)
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {("help", "-"): []}
        for variant in checkouts:
            for name in args.models.split(","):
                runs[(variant, name)] = []
        record["loadavg_after_building"] = loadavg()
        for _ in range(args.repeats):  # interleaved, so a change of load hits every variant
            for (variant, name), done in runs.items():
                if variant == "help":
                    done.append(timed([sys.executable, str(ROOT / "bin" / "tag"), "--help"], env, args.core))
                    continue
                checkout, variant_env = checkouts[variant]
                done.append(
                    timed(
                        [sys.executable, str(checkout / "bin" / "tag"), "--model", str(models[name]), str(text)],
                        variant_env,
                        args.core,
                    )
                )
    record["help_s"] = round(statistics.median(t for _, t in runs[("help", "-")]), 3)
    for (variant, name), done in runs.items():
        if variant != "help":
            record.setdefault(variant, {})[name] = {
                "first_line_s": round(statistics.median(f for f, _ in done), 2),
                "exit_s": round(statistics.median(t for _, t in done), 2),
                "first_line_runs_s": [round(f, 2) for f, _ in done],
            }
    from harness import report

    record.update(loadavg_end=loadavg())
    report(record)


if __name__ == "__main__":
    main()
