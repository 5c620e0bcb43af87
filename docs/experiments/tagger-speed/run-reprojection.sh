#!/bin/bash
# 2026-11-25 (issue 35): the reprojection without products for the padding (tagger/reprojection.py) before and after, 1 thread pinned to core 0, the
# other core's search paused (SIGSTOP) for the duration and the pause logged. before = a worktree of
# 5b84e62 (the CRF loss), after = the working tree with tagger.reprojection. Processes alternate.
set -u
cd /work/main
BEFORE=/work/scratch/before
OUT=docs/experiments/tagger-speed/reprojection.log
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 20
{
echo "# start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"
for round in 1 2; do
  echo "# round $round: pooled_flair.py, the 2,000-sentence CoNLL-2000 slice, 3 epochs: before (5b84e62), then after"
  .venv/bin/python $BEFORE/bench/pooled_flair.py --data ../shared/data/conll2000 --sentences 2000 --epochs 3 --core 0 2>/dev/null | tail -n 1
  .venv/bin/python bench/pooled_flair.py --data ../shared/data/conll2000 --sentences 2000 --epochs 3 --core 0 2>/dev/null | tail -n 1
done
echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
