#!/bin/bash
# 2026-11-26 (issue 35): prediction one batch at a time (32aae23) on top of the decoding (d82e38b): two rounds of
# bench/tagger_epoch.py --match-params (ours and flair_lstm through tagger.prediction, flair_stock through
# flair's predict on the whole list); 1 thread pinned to core 0, issue 30's two searches paused (SIGSTOP).
set -u
cd /work/main
OUT=docs/experiments/tagger-speed/predict.log
PY=.venv/bin/python
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 15
peaks() { echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 $PY -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"; }
{
echo "# run-predict.sh: start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg); main at $(git rev-parse --short HEAD); $(lscpu | grep 'Model name' | tr -s ' ')"
peaks
for round in 1 2; do
  echo "# round $round: tagger_epoch.py --match-params --threads 1"
  taskset -c 0 $PY bench/tagger_epoch.py --match-params --threads 1 2>/dev/null | tail -n 1
done
peaks
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
