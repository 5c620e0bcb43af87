#!/bin/bash
# Issue 35 item 4 after MARGIN 1.2 -> 1.05 (/work/main at 5167c10) against main before item 4 (/work/wt35 = edcc89b):
# DARTS search steps at H 64 and 300, processes alternating, 3 rounds; then main's step against the
# original DARTS code's structure (reference/darts.py) at H 300, orders 1 and 2.
# One thread pinned to core 0, the other core idle (issue 30's searches paused with SIGSTOP).
PY=/work/main/.venv/bin/python
peaks() { (cd /work/main/bench && taskset -c 0 $PY -c "import harness, json; print(json.dumps({'gemm_peaks': harness.gemm_peaks(), 'loadavg': open('/proc/loadavg').read().strip()}))"); }
echo "# $(date -u +%FT%T) UTC start, loadavg $(cat /proc/loadavg)"
peaks
for round in 1 2 3; do
  for side in wt35 main; do
    for args in "--method darts --nhid 300" "--method darts --nhid 64"; do
      echo "## $side search_step $args round $round"
      (cd /work/$side && taskset -c 0 $PY bench/search_step.py $args --no-reference --orders 1 --threads 1 --repeats 5 2>&1 | tail -1)
    done
  done
done
echo "## main search_step darts H=300 against the original DARTS code's structure, orders 1 and 2"
(cd /work/main && taskset -c 0 $PY bench/search_step.py --method darts --nhid 300 --threads 1 --repeats 5 2>&1 | tail -1)
peaks
echo "# $(date -u +%FT%T) UTC end, loadavg $(cat /proc/loadavg)"
