"""Forward+backward time per batch of the FrozenRNN BiRNN (DARTS_V2) against a bidirectional nn.LSTM.

A CoNLL-like batch: 32 sentences whose lengths are drawn (seeded) from N(14, 10), at least 1,
padded to the longest; input 4,096 (a stacked-embedding width), hidden 512, no dropout, input
not requiring grad (frozen embeddings). FrozenRNN gets the padded batch and the lengths (it steps only the sequences
still running);
nn.LSTM gets a PackedSequence, as flair's tagger feeds it ("lstm"), and, for scale, the padded
batch, which runs its fused kernel over the padding too ("lstm_padded"; wrong past each length
in the backward direction, a speed baseline only).

"frozen" runs the layer on the device's `auto` backend (`nas.fast.backends`): on a CPU the fused time
loop (`nas/fast/frozen_loop.py`: its per-step GEMMs on oneDNN, its steps and kernels in C++; without
them the definition), "frozen_mkl" the same loop with its GEMMs
on torch.mm / torch.bmm (MKL) instead of oneDNN; on a GPU "frozen" is cuda-graphs' compiled time step
and "frozen_triton_loop" the whole loop as two Triton kernels (`cuda-loop`, nas/fast/triton_loop.py)
instead of those two; "frozen_autograd" the same layer and weights op by
op through autograd (the `torch` backend, the definition): all timed in one interleaved run. A cell
the fused loop does not run (ESS gates) runs on cpu-fused's autograd path alone: for it
"frozen_autograd" (its per-step products `StepWeight`s, on oneDNN where `Gemm.prefers_onednn`
puts them under the `onednn` rule) and "frozen_autograd_mkl" (all on torch.matmul) are timed.

FLOPs are the matrix products executed, counted by torch's FlopCounterMode (forward and backward);
the fused padded LSTM kernel is invisible to it and is counted analytically with the same
formula, and so are oneDNN's matmuls in the fused loop: every FrozenRNN variant is counted on
the autograd path, which runs the same products as aten matmuls; on a GPU, where cuDNN runs the
packed LSTM as one kernel, its products are counted on a CPU copy. "useful" GFLOP/s divide the
FLOPs that the real tokens need (the packed LSTM's, or
FrozenRNN's on each sentence alone) by the time, so work spent on padding earns nothing.
Prints one JSON line of medians.

    python bench/birnn.py [--device cuda] [--repeats 7]
    taskset -c 0 python bench/birnn.py --threads 1 --repeats 15   # side by side on a shared CPU
"""

from __future__ import annotations

import argparse

from harness import count_flops, default_device, gemm_peaks, gemm_sample, median, report, timed

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402

import nas.fast.kernels as fast_kernels  # noqa: E402
import nas.fast.backends as backends  # noqa: E402
import nas.fast.frozen_loop as frozen_loop  # noqa: E402
from nas.cells.cell import FrozenRNN  # noqa: E402
from nas.common import devices  # noqa: E402
from nas.cells.genotype import load  # noqa: E402


def lstm_forward_flops(positions: int, ninp: int, nhid: int, directions: int = 2) -> float:
    """Forward GEMM FLOPs of an LSTM: per position and direction, [x | h]·W of (ninp+nhid) × 4·nhid."""
    return 2.0 * (ninp + nhid) * 4 * nhid * positions * directions


def lstm_flops(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor, grad_out: torch.Tensor) -> int:
    """FLOPs of the packed LSTM's forward and backward, counted on a CPU copy: on the CPU it runs as aten
    matrix products that FlopCounterMode sees, on a GPU as one cuDNN kernel that it does not (it counts 0)."""
    cpu = nn.LSTM(lstm.input_size, lstm.hidden_size, bidirectional=lstm.bidirectional).train()
    x, grad_out = x.cpu(), grad_out.cpu()

    def run() -> None:
        out, _ = cpu(pack_padded_sequence(x, lengths, enforce_sorted=False))
        (pad_packed_sequence(out, total_length=x.size(0))[0] * grad_out).sum().backward()

    return count_flops(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's own choice]")
    parser.add_argument("--cell", default="DARTS_V2")
    parser.add_argument("--ninp", type=int, default=4096)
    parser.add_argument("--nhid", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--mean-length", type=float, default=14.0)
    parser.add_argument("--sd-length", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--runs",
        help="comma-separated names of the runs to time (e.g. frozen_triton_loop,lstm; the "
        "FLOPs are counted on frozen_autograd all the same) [default: every run]",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    gen = torch.Generator().manual_seed(args.seed)
    lengths = (torch.randn(args.batch, generator=gen) * args.sd_length + args.mean_length).round().clamp(min=1).long()
    T, B = int(lengths.max()), args.batch
    x = torch.randn(T, B, args.ninp, generator=gen)
    x[torch.arange(T).unsqueeze(1) >= lengths] = 0.0
    x = x.to(device)
    grad_out = torch.randn(T, B, 2 * args.nhid, generator=gen).to(device)
    torch.manual_seed(args.seed)
    frozen = FrozenRNN(load(args.cell), args.ninp, args.nhid, directions=2).to(device).train()
    lstm = nn.LSTM(args.ninp, args.nhid, bidirectional=True).to(device).train()

    fast, definition = backends.choose("auto", device, gemm_rule="onednn"), backends.Torch()
    on_mkl = {"cpu-fused": backends.choose("auto", device, gemm_rule="mkl"), "torch": backends.Torch()}

    def run_frozen(backend: backends.Backend = fast, onednn: bool = True) -> None:
        frozen.backend = backend if onednn else on_mkl[backend.name]
        frozen.zero_grad(set_to_none=True)
        out, _ = frozen(x, lengths=lengths)
        (out * grad_out).sum().backward()

    def run_one(b: int) -> None:  # sentence b alone: the work its real tokens need
        frozen.backend = definition
        frozen.zero_grad(set_to_none=True)
        out, _ = frozen(x[: lengths[b], b : b + 1])
        (out * grad_out[: lengths[b], b : b + 1]).sum().backward()

    def run_lstm() -> None:
        lstm.zero_grad(set_to_none=True)
        out, _ = lstm(pack_padded_sequence(x, lengths, enforce_sorted=False))
        out, _ = pad_packed_sequence(out, total_length=T)
        (out * grad_out).sum().backward()

    def run_lstm_padded() -> None:
        lstm.zero_grad(set_to_none=True)
        out, _ = lstm(x)
        (out * grad_out).sum().backward()

    fused = {
        "frozen": run_frozen,
        "frozen_mkl": lambda: run_frozen(onednn=False),
    }
    if device.type == "cuda":  # the CPU's variants mean nothing there; the loop's Triton kernels instead
        fused = {"frozen": run_frozen}
        if devices.triton_available():
            fused["frozen_triton_loop"] = lambda: run_frozen(backends.CudaLoop())
    fusable = frozen.inter is None and frozen_loop.supports({op for node in frozen.genotype.nodes for op, _ in node})
    unfused = {"frozen_autograd_mkl": lambda: run_frozen(onednn=False)}  # every product on torch.matmul
    runs = {
        **(fused if fusable else unfused),
        "frozen_autograd": lambda: run_frozen(definition if fusable else fast),
        "lstm": run_lstm,
        "lstm_padded": run_lstm_padded,
    }
    ours = [name for name in runs if name.startswith("frozen")]
    tokens = int(lengths.sum())
    flops = {"frozen_autograd": count_flops(runs["frozen_autograd"]), "lstm": lstm_flops(lstm, x, lengths, grad_out)}
    flops.update(dict.fromkeys(ours, flops["frozen_autograd"]))
    # Same executed work per position as the packed LSTM (measured), over every padded position.
    flops["lstm_padded"] = flops["lstm"] * (T * B) / tokens
    frozen_useful = sum(count_flops(lambda: run_one(b)) for b in range(B))
    useful = {**dict.fromkeys(ours, frozen_useful), "lstm": flops["lstm"], "lstm_padded": flops["lstm"]}
    if args.runs:
        unknown = set(args.runs.split(",")) - set(runs)
        if unknown:
            parser.error(f"--runs: no run {', '.join(sorted(unknown))} here (runs: {', '.join(runs)})")
        runs = {name: run for name, run in runs.items() if name in args.runs.split(",")}
        ours = [name for name in runs if name.startswith("frozen")]
    for run in runs.values():  # warm-up
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    peak_samples: list[dict[str, float]] = []
    for _ in range(args.repeats):  # interleaved, so load changes hit every model alike
        for name, run in runs.items():
            with torch.no_grad():  # as a training step changes them: the fused layer packs its weights anew
                for p in frozen.parameters():
                    p.add_(0.0)
            times[name].append(timed(run, device))
        peak_samples.append(gemm_sample(device))
    peak = max(gemm_peaks(peak_samples).values())  # the faster backend's
    record: dict = {
        "bench": "birnn",
        "device": str(device),
        "cell": args.cell,
        "ninp": args.ninp,
        "nhid": args.nhid,
        "batch": B,
        "padded_length": T,
        "tokens": tokens,
        "lengths": lengths.tolist(),
        "repeats": args.repeats,
        "fp32_gemm_peak_gflop_s": round(peak, 2),
        "fused_kernels": "c++" if fast_kernels.compiled() is not None else "none built (frozen = the definition)",
        "flops": "GEMM FLOPs executed fwd+bwd (FlopCounterMode; lstm_padded scaled from lstm)",
        "lstm_forward_gflop_analytic": round(lstm_forward_flops(tokens, args.ninp, args.nhid) / 1e9, 4),
    }
    for name in runs:
        sec = median(times[name])
        record[f"{name}_s"] = round(sec, 4)
        record[f"{name}_gflop"] = round(flops[name] / 1e9, 3)
        record[f"{name}_gflop_s"] = round(flops[name] / sec / 1e9, 2)
        record[f"{name}_useful_gflop_s"] = round(useful[name] / sec / 1e9, 2)
        record[f"{name}_fraction_of_peak"] = round(flops[name] / sec / 1e9 / peak, 3)
    for name in ours:
        for base in (base for base in ("lstm", "lstm_padded") if base in runs):
            record[f"time_ratio_{name}_over_{base}"] = round(record[f"{name}_s"] / record[f"{base}_s"], 3)
            record[f"gflop_s_ratio_{name}_over_{base}"] = round(
                record[f"{name}_gflop_s"] / record[f"{base}_gflop_s"], 3
            )
            record[f"useful_gflop_s_ratio_{name}_over_{base}"] = round(
                record[f"{name}_useful_gflop_s"] / record[f"{base}_useful_gflop_s"], 3
            )
    if {"frozen", "frozen_triton_loop"} <= set(runs):
        record["speedup_triton_loop_over_frozen"] = round(record["frozen_s"] / record["frozen_triton_loop_s"], 3)
    if fusable and {"frozen", "frozen_autograd"} <= set(runs):
        record["speedup_fused_over_autograd"] = round(record["frozen_autograd_s"] / record["frozen_s"], 3)
    if fusable and device.type == "cpu" and {"frozen", "frozen_mkl"} <= set(runs):
        record["speedup_onednn_over_mkl"] = round(record["frozen_mkl_s"] / record["frozen_s"], 3)
    report(record, peak_samples if device.type == "cpu" else None)  # else the CPU's, measured apart


if __name__ == "__main__":
    main()
