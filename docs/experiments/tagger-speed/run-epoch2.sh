#!/bin/bash
# 2026-11-25 (issue 35): bench/tagger_epoch.py --match-params once more at 7aa8eb5 (a second round for
# crf2.log's figure), 1 thread pinned to core 0, the other core's search paused (SIGSTOP), pause logged.
set -u
cd /work/main
OUT=docs/experiments/tagger-speed/crf2.log
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 20
{
echo "# run-epoch2.sh: start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"
echo "# after (7aa8eb5), round 2: tagger_epoch.py --match-params"
taskset -c 0 .venv/bin/python bench/tagger_epoch.py --match-params --threads 1 2>/dev/null | tail -n 1
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
