#!/bin/bash
# Issue 35: the ESS BiRNN with StepWeight's per-step products packed on oneDNN where measured faster (wt36),
# against the same on torch.matmul (the variant frozen_autograd_mkl), interleaved in one process; then the
# search step at H=64 with the fused loops' small products on MKL (experiment, /tmp/prof/small_mkl.py).
# One thread pinned to core 0, the other core idle (issue 30's searches and all tests paused with SIGSTOP).
PY=/work/main/.venv/bin/python
peaks() { (cd /work/wt36/bench && taskset -c 0 $PY -c "import harness, json; print(json.dumps({'gemm_peaks': harness.gemm_peaks(), 'loadavg': open('/proc/loadavg').read().strip()}))"); }
echo "# $(date -u +%FT%T) UTC start, loadavg $(cat /proc/loadavg)"
peaks
echo "## wt36 birnn ess_joint_search_h64"
(cd /work/wt36 && taskset -c 0 $PY bench/birnn.py --cell ess_joint_search_h64 --threads 1 --repeats 5 2>&1 | tail -1)
echo "## wt36 search steps at H=64, fused loops' products below 2^21 multiply-adds on MKL (experiment)"
(cd /work/wt36 && PYTHONPATH=/work/wt36 taskset -c 0 $PY /work/runs/timing35/small_mkl.py 64 2>&1 | tail -1)
peaks
echo "# $(date -u +%FT%T) UTC end, loadavg $(cat /proc/loadavg)"
