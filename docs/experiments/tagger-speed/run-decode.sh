#!/bin/bash
# 2026-11-26 (issue 35): the Viterbi decoding without flair's per-token Python (d82e38b): decode.py, then
# bench/tagger_epoch.py --match-params, which now also times flair_stock's prediction (flair's own
# decoder); 1 thread pinned to core 0, issue 30's two searches paused (SIGSTOP), pauses logged.
set -u
cd /work/main
OUT=docs/experiments/tagger-speed/decode.log
PY=.venv/bin/python
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 15
peaks() { echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 $PY -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"; }
{
echo "# run-decode.sh: start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg); main at $(git rev-parse --short HEAD); $(lscpu | grep 'Model name' | tr -s ' ')"
peaks
echo "# decode.py"
taskset -c 0 $PY docs/experiments/tagger-speed/decode.py 2>/dev/null
echo "# tagger_epoch.py --match-params --threads 1"
taskset -c 0 $PY bench/tagger_epoch.py --match-params --threads 1 2>/dev/null | tail -n 1
peaks
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
