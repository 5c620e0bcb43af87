#!/bin/bash
# Issue 35 item 2: the ESS search step and the ESS BiRNN, before (d0be6d6, /work/wt_old) and after (/work/wt35),
# one thread pinned to core 0, the other core idle (issue 30's searches paused with SIGSTOP), processes alternating.
O=/work/runs/timing35
PY=/work/main/.venv/bin/python
peaks() { (cd /work/wt35/bench && taskset -c 0 $PY -c "import harness, json; print(json.dumps({'gemm_peaks': harness.gemm_peaks(), 'loadavg': open('/proc/loadavg').read().strip()}))"); }
echo "# $(date -u +%FT%T) UTC start, loadavg $(cat /proc/loadavg)"
peaks
for round in 1 2; do
  for side in old wt35; do
    for H in 64 300; do
      echo "## $side search_step ess H=$H round $round"
      (cd /work/$( [ $side = old ] && echo wt_old || echo wt35 ) && taskset -c 0 $PY bench/search_step.py --method ess --no-reference --orders 1 --threads 1 --nhid $H --repeats 5 2>&1 | tail -1)
    done
  done
done
for side in old wt35; do
  echo "## $side birnn ess_joint_search_h64"
  (cd /work/$( [ $side = old ] && echo wt_old || echo wt35 ) && taskset -c 0 $PY bench/birnn.py --cell ess_joint_search_h64 --threads 1 --repeats 5 2>&1 | tail -1)
done
peaks
echo "# $(date -u +%FT%T) UTC end, loadavg $(cat /proc/loadavg)"
