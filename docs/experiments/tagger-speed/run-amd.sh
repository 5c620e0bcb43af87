#!/bin/bash
# 2026-11-26 (issue 35): issue 35's benchmarks at main's head on an AMD EPYC host where oneDNN leads MKL
# about 2x at 1 thread, 1 thread pinned to core 0 (the 2-thread row on cores 0-1), issue 30's two searches
# paused (SIGSTOP) for the whole run, pauses logged. The ESS search step also against d0be6d6 (the code
# before the ESS speed work, the step "today" when issue 35 was filed), a worktree outside the
# repository at /work/wt_ess_before with its C++ kernels built in place; processes alternate.
set -u
cd /work/main
OUT=docs/experiments/tagger-speed/amd.log
PY=.venv/bin/python
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 20
peaks() { echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 $PY -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"; }
{
echo "# run-amd.sh: start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg); main at $(git rev-parse --short HEAD); $(lscpu | grep 'Model name' | tr -s ' ')"
peaks
echo "# tagger_epoch.py --match-params --threads 1"
taskset -c 0 $PY bench/tagger_epoch.py --match-params --threads 1 2>/dev/null | tail -n 1
echo "# birnn.py --threads 1 (DARTS_V2, ninp 4096, hidden 512)"
taskset -c 0 $PY bench/birnn.py --threads 1 2>/dev/null | tail -n 1
echo "# birnn.py --threads 2 (cores 0-1)"
taskset -c 0,1 $PY bench/birnn.py --threads 2 2>/dev/null | tail -n 1
echo "# birnn.py --cell ess_joint_search_h64 --threads 1 --repeats 3"
taskset -c 0 $PY bench/birnn.py --cell ess_joint_search_h64 --threads 1 --repeats 3 2>/dev/null | tail -n 1
echo "# search_step.py --method darts --nhid 300 --threads 1 --repeats 5 (fused against reference/darts.py, both orders)"
taskset -c 0 $PY bench/search_step.py --method darts --nhid 300 --threads 1 --repeats 5 2>/dev/null | tail -n 1
for round in 1 2; do
  echo "# round $round: search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5: before (d0be6d6), then after (head)"
  (cd /work/wt_ess_before && taskset -c 0 /work/main/.venv/bin/python bench/search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5 2>/dev/null | tail -n 1)
  taskset -c 0 $PY bench/search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5 2>/dev/null | tail -n 1
done
peaks
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
