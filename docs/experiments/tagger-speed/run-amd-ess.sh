#!/bin/bash
# 2026-11-26 (issue 35): the ESS joint search step (H = 64, first order), d0be6d6 (the code before the ESS
# speed work; a worktree outside the repository at /work/wt_ess_before, its C++ kernels built in place,
# given head's bench/search_step.py and bench/harness.py, as docs/experiments/ess-speed did) against
# main's head, processes alternating, two rounds; 1 thread pinned to core 0, issue 30's two searches
# paused (SIGSTOP), pauses logged. Appends to amd.log (run-amd.sh's ESS rows failed: d0be6d6's own
# bench/search_step.py has no --method ess).
set -u
cd /work/main
OUT=docs/experiments/tagger-speed/amd.log
PY=/work/main/.venv/bin/python
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 15
peaks() { echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 $PY -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"; }
{
echo "# run-amd-ess.sh: start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg); main at $(git rev-parse --short HEAD)"
peaks
for round in 1 2; do
  echo "# round $round: search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5: before (d0be6d6), then after (head)"
  (cd /work/wt_ess_before && taskset -c 0 $PY bench/search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5 2>/dev/null | tail -n 1)
  taskset -c 0 $PY bench/search_step.py --method ess --no-reference --nhid 64 --orders 1 --threads 1 --repeats 5 2>/dev/null | tail -n 1
done
peaks
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
