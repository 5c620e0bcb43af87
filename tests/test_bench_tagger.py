"""The tagger benchmarks run end to end at toy sizes and print their JSON line: nothing else runs
them, and a changed signature (the genotype became a `Genotype`) broke them once unnoticed."""

import json
import subprocess
import sys
from pathlib import Path

from tagger_data import write_conll03, write_vectors

BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_bench(name: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCH / name), *args, "--threads", "1"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tagger_epoch_matches_the_lstm_to_the_cell_and_times_both():
    record = run_bench(
        "tagger_epoch.py",
        "--sentences",
        "20",
        "--hidden-size",
        "8",
        "--match-params",
        "--repeats",
        "1",
        "--predict-repeats",
        "1",
    )
    # DARTS_V2 at hidden 8 over 100-d vectors: 2·(108·16 + 8·8·16) = 5,504 parameters; flair's LSTM
    # at hidden 6: 2·4·6·(100 + 6 + 2) = 5,184, the closest count (hidden 7 gives 6,104)
    assert record["darts_v2_rnn_parameters"] == 5504
    assert (record["flair_lstm_hidden_size"], record["flair_lstm_rnn_parameters"]) == (6, 5184)
    assert record["darts_v2_epoch_s"] >= 0 and record["flair_lstm_predict_sentences_per_s"] > 0
    assert record["flair_stock_epoch_s"] > 0 and record["epoch_time_ratio_vs_flair_stock"] > 0
    assert record["flair_stock_predict_sentences_per_s"] > 0 and record["predict_speed_ratio_vs_flair_stock"] > 0
    machine = record["machine"]  # every benchmark's line names the machine it ran on (bench/harness.py)
    assert machine["cpu_model"] and set(machine["isa"]) == {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}
    assert set(machine["gemm_peaks_gflop_s"]) == {"mkl_torch_mm", "onednn"} and machine["gemm_peak_threads"] == 1
    assert min(machine["gemm_peaks_gflop_s"].values()) > 0 and machine["gemm_rule"] in ("onednn", "mkl")
    assert machine["torch"] == record["torch"]


def test_the_machine_is_read_from_cpuinfo():
    sys.path.insert(0, str(BENCH))
    from harness import cpu_info

    intel = (
        "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
        "model name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n"
    )
    assert cpu_info(intel) == {
        "cpu_model": "Intel(R) Xeon(R) Platinum 8481C",
        "cpu_vendor": "GenuineIntel",
        "cpu_family_model": "6/143",
        "isa": {"avx2": True, "avx512f": True, "avx512_bf16": False, "amx_tile": True, "amx_bf16": True},
        "logical_cpus": cpu_info("")["logical_cpus"],
    }


def test_tagger_learning_records_dev_f1_at_each_evaluation(tmp_path):
    write_conll03(tmp_path / "conll03", sizes=(40, 12, 12))
    vectors = write_vectors(tmp_path / "vectors.txt")
    record = run_bench(
        "tagger_learning.py",
        "--corpus",
        "conll03",
        "--data",
        str(tmp_path / "conll03"),
        "--embeddings",
        f"glove:{vectors}",
        "--hidden-size",
        "8",
        "--epochs",
        "1",
        "--evals-per-epoch",
        "2",
    )
    assert [at for at, _ in record["dev_f1"]] == [0.5, 1.0]  # 2 batches of 32 over 40 sentences
    assert record["rnn_parameters"] > 0 and set(record["grad_norms"][0]) == {
        "embedding2nn",
        "rnn",
        "linear",
        "crf",
        "total",
    }
