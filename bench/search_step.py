"""Tokens/s of a full search step (α step + weight step, `Searcher.bilevel_step`), fast vs slow reference.

"fast" is our SearchRNN and Architect (the fused search cell of nas/fast/search_loop.py where it
applies); "autograd" (--autograd) the same cell op by op through autograd; "compiled" (--compile)
that with the cell's time step through torch.compile; "reference" is the per-edge, per-op cell and the α step with the reference
DARTS code's structure (full backward, copied model) from reference/darts.py. All run the same
model (synthetic 10k-word vocabulary, as PTB) with the same weights and the DARTS training-mode
dropouts, interleaved rep by rep so that load on the shared machine hits them alike. FLOPs per token are the matrix products each implementation executes in one step, counted
by torch's FlopCounterMode (forward and backward, so a first-order α step that skips weight
gradients counts less). The fp32 GEMM peak is the median of 2048³ sgemm timings taken in the
same run. Prints one JSON line of medians.

    python bench/search_step.py [--device cuda] [--precision bf16] [--orders 1 2]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

from harness import DTYPES, GEMM_FLOPS, count_flops, default_device, gemm_seconds, median, report, timed

import torch  # noqa: E402  (after common, which sets sys.path)

import nas.methods.base  # noqa: E402
import nas.methods.darts  # noqa: E402
from nas.common.runs import RunDir  # noqa: E402
from nas.runs.config import SearchConfig  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402
from nas.lm.evaluation import get_batch  # noqa: E402
from nas.methods.architect import language_model_loss  # noqa: E402
from nas.runs.search import Searcher  # noqa: E402
from reference.darts import ReferenceArchitect, ReferenceSearchRNN  # noqa: E402


def make_searcher(config: SearchConfig, corpus: Corpus, run_dir: Path, reference: bool) -> Searcher:
    """A Searcher exactly as search-lm builds it; for the reference, its cell and architect classes are swapped in."""
    torch.manual_seed(config.seed)  # the same initial weights for every implementation
    def reference_cell(ninp, nhid, steps, rule, *rest, **options) -> ReferenceSearchRNN:
        """The reference cell where Darts builds a SearchRNN: it takes the method's name, not its rule."""
        return ReferenceSearchRNN(ninp, nhid, steps, config.method, *rest, **options)

    def reference_architect(model, *args, loss_fn, **options) -> ReferenceArchitect:
        """The reference α step where Darts builds an Architect: it knows only the language model's loss."""
        assert loss_fn is language_model_loss, "the reference α step is the language model's"
        return ReferenceArchitect(model, *args, **options)

    with contextlib.ExitStack() as swaps:
        if reference:
            swaps.enter_context(mock.patch.object(nas.methods.darts, "SearchRNN", reference_cell))
            swaps.enter_context(mock.patch.object(nas.methods.base, "Architect", reference_architect))
        searcher = Searcher(config, RunDir(run_dir), corpus)
    searcher.model.train()
    B = config.batch_size
    searcher.hidden, searcher.hidden_valid = searcher.model.init_hidden(B), searcher.model.init_hidden(B)
    return searcher


def step_fn(searcher: Searcher, bptt: int, precision: str):
    """One full search step on the next train / search batches."""
    device = searcher.device
    state = {"pos": 0}

    def step() -> None:
        pos = state["pos"]
        state["pos"] = (pos + bptt) % (searcher.train_data.size(0) - bptt - 1)
        words, targets = get_batch(searcher.train_data, pos, bptt)
        valid = get_batch(searcher.search_data, pos % (searcher.search_data.size(0) - bptt - 1), bptt)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            searcher.bilevel_step(words, targets, valid, bptt)

    return step


def config_of(args, order: int) -> SearchConfig:
    return SearchConfig(order=order, method=args.method, emsize=args.nhid, nhid=args.nhid, nodes=args.nodes,
                        batch_size=args.batch_size, bptt=args.bptt, device=args.device)


def memory_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc (Linux): unlike ru_maxrss, the peak
    starts afresh at exec, not at the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory(args, corpus: Corpus, tmp: Path, impl: str) -> None:
    """Prints this process's peak RSS over 3 steps of `impl` (MiB), and how far the steps raised it
    above the RSS before them: `--memory` runs it once per implementation in a fresh process."""
    order = args.orders[-1]
    searcher = make_searcher(config_of(args, order), corpus, tmp / impl, impl == "reference")
    searcher.rnn.compile, searcher.rnn.fused = impl == "compiled", impl == "fast"
    step = step_fn(searcher, args.bptt, args.precision)
    before = memory_mib("VmRSS")
    for _ in range(3):
        step()
    peak = memory_mib("VmHWM")
    print(json.dumps({"impl": impl, "order": order, "peak_rss_mib": round(peak, 1), "step_rss_mib": round(peak - before, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--method", choices=["darts", "idarts", "ess"], default="darts",
                        help="ess: joint search (intra and inter-cell gates); it has no reference, so needs --no-reference")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per implementation and order")
    parser.add_argument("--no-reference", action="store_true", help="time only the fast cell")
    parser.add_argument("--autograd", action="store_true", help="also time the cell op by op through autograd (not fused)")
    parser.add_argument("--compile", action="store_true", help="also time the autograd cell with its time step through torch.compile")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's own choice]")
    parser.add_argument("--nhid", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--memory", action="store_true",
                        help="also measure each implementation's peak memory (RSS) over 3 steps, each in a fresh process")
    parser.add_argument("--memory-of", choices=["fast", "autograd", "compiled", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method == "ess" and not args.no_reference:
        parser.error("--method ess: the original DARTS code has no ESS gates; add --no-reference")

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokens = args.batch_size * (8 * args.bptt + 2)
    vocab = [f"w{i}" for i in range(args.vocab)]
    corpus = Corpus(vocab, torch.randint(args.vocab, (tokens,)), torch.randint(args.vocab, (tokens,)),
                    torch.randint(args.vocab, (tokens,)), {s: Path("synthetic") for s in ("train", "valid", "test")})
    impls = (["fast"] + (["autograd"] if args.autograd else []) + (["compiled"] if args.compile else [])
             + ([] if args.no_reference else ["reference"]))
    record: dict = {"bench": "search_step", "device": str(device), "precision": args.precision,
                    "method": args.method, "nhid": args.nhid, "emsize": args.nhid, "nodes": args.nodes,
                    "bptt": args.bptt, "batch": args.batch_size, "vocab": args.vocab, "repeats": args.repeats,
                    "flops": "GEMM FLOPs executed per step (torch FlopCounterMode, fwd+bwd); elementwise not counted"}
    if args.memory_of:
        with tempfile.TemporaryDirectory() as tmp:
            return peak_memory(args, corpus, Path(tmp), args.memory_of)
    peak_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for order in args.orders:
            config = config_of(args, order)
            steps = {}
            for impl in impls:
                searcher = make_searcher(config, corpus, Path(tmp) / f"{impl}{order}", impl == "reference")
                searcher.rnn.compile, searcher.rnn.fused = impl == "compiled", impl == "fast"
                steps[impl] = step_fn(searcher, args.bptt, args.precision)
                for _ in range(2 if impl == "compiled" else 1):  # warm-up (allocator; compiling)
                    steps[impl]()
                record[f"order{order}_{impl}_gflop_per_token"] = count_flops(steps[impl]) / (args.batch_size * args.bptt) / 1e9
            times = {impl: [] for impl in impls}
            for _ in range(args.repeats):  # interleaved, so load changes hit every implementation alike
                for impl in impls:
                    times[impl].append(timed(steps[impl], device))
                peak_times.append(gemm_seconds(device))
            for impl in impls if args.memory else ():
                command = [sys.executable, __file__, *sys.argv[1:], "--memory-of", impl, "--orders", str(order)]
                rss = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
                record[f"order{order}_{impl}_peak_rss_mib"] = rss["peak_rss_mib"]
                record[f"order{order}_{impl}_step_rss_mib"] = rss["step_rss_mib"]
            for impl in impls:
                sec = median(times[impl])
                tok_s = args.batch_size * args.bptt / sec
                gflops = record[f"order{order}_{impl}_gflop_per_token"] * tok_s
                record[f"order{order}_{impl}_step_s"] = round(sec, 4)
                record[f"order{order}_{impl}_tokens_per_s"] = round(tok_s, 1)
                record[f"order{order}_{impl}_gflop_s"] = round(gflops, 2)
            for impl in [i for i in impls if i != "reference" and "reference" in impls]:
                record[f"order{order}_{impl}_speedup_vs_reference"] = round(
                    record[f"order{order}_{impl}_tokens_per_s"] / record[f"order{order}_reference_tokens_per_s"], 3)
    peak = GEMM_FLOPS / median(peak_times) / 1e9
    record["fp32_gemm_peak_gflop_s"] = round(peak, 2)
    for key in [k for k in record if k.endswith("_gflop_s") and k != "fp32_gemm_peak_gflop_s"]:
        record[key.replace("_gflop_s", "_fraction_of_peak")] = round(record[key] / peak, 3)
    for key in [k for k in record if k.endswith("_gflop_per_token")]:
        record[key] = round(record[key], 4)
    report(record)


if __name__ == "__main__":
    main()
