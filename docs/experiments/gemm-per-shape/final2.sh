#!/bin/bash
# Issue 35 items 2 and 4, after the per-shape GEMM backend choice (/work/wt36) against main before it (/work/wt35 = edcc89b):
# search steps (DARTS at H 64 and 300; ESS at H 64) and the BiRNNs (DARTS_V2, the ESS cell), processes alternating;
# then the search step against the original DARTS code (reference/darts.py) at H 300 on wt36.
# One thread pinned to core 0, the other core idle (issue 30's searches and all tests paused with SIGSTOP).
PY=/work/main/.venv/bin/python
peaks() { (cd /work/wt36/bench && taskset -c 0 $PY -c "import harness, json; print(json.dumps({'gemm_peaks': harness.gemm_peaks(), 'loadavg': open('/proc/loadavg').read().strip()}))"); }
echo "# shapes"; (cd /work/wt36 && PYTHONPATH=/work/wt36 taskset -c 0 $PY /work/runs/timing35/shapes.py)
echo "# $(date -u +%FT%T) UTC start, loadavg $(cat /proc/loadavg)"
peaks
for round in 1 2; do
  for side in wt35 wt36; do
    for args in "--method darts --nhid 64" "--method darts --nhid 300" "--method ess --nhid 64"; do
      echo "## $side search_step $args round $round"
      (cd /work/$side && taskset -c 0 $PY bench/search_step.py $args --no-reference --orders 1 --threads 1 --repeats 5 2>&1 | tail -1)
    done
  done
done
for side in wt35 wt36; do
  for cell in DARTS_V2 ess_joint_search_h64; do
    echo "## $side birnn $cell"
    (cd /work/$side && taskset -c 0 $PY bench/birnn.py --cell $cell --threads 1 --repeats 5 2>&1 | tail -1)
  done
done
echo "## wt36 search_step darts H=300 against the original DARTS code, orders 1 and 2"
(cd /work/wt36 && taskset -c 0 $PY bench/search_step.py --method darts --nhid 300 --threads 1 --repeats 5 2>&1 | tail -1)
peaks
echo "# $(date -u +%FT%T) UTC end, loadavg $(cat /proc/loadavg)"
