"""bin/evaluate's start-up before and after seqeval was imported beside the stand-ins (tagger.light_import):
each checkout's bin/evaluate on the same GloVe tagger and split, interleaved, pinned to one core, one thread;
median wall and CPU (user + system) seconds, and the load at start and end.

    python time_evaluate.py --before /work/main --after /work/wt-i65 --model RUN --repeats 5 --core 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def once(checkout: Path, model: str, core: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(checkout / "bin" / "evaluate"),
                "--model",
                model,
                "--out",
                f"{out}/e",
                "--threads",
                "1",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)},
            preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        )
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--core", type=int, default=1)
    args = parser.parse_args()
    load_start = open("/proc/loadavg").read().split()[:3]
    times: dict[str, list] = {"before": [], "after": []}
    for _ in range(args.repeats):
        for name in ("before", "after"):
            times[name].append(once(getattr(args, name), args.model, args.core))
    print(
        json.dumps(
            {
                name: {
                    "wall_median_s": statistics.median(w for w, _ in runs),
                    "cpu_median_s": statistics.median(c for _, c in runs),
                    "runs": runs,
                }
                for name, runs in times.items()
            }
            | {"load_start": load_start, "load_end": open("/proc/loadavg").read().split()[:3], "core": args.core}
        )
    )


if __name__ == "__main__":
    main()
