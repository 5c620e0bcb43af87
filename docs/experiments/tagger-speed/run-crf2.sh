#!/bin/bash
# 2026-11-25 (issue 35): the CRF loss from emissions and transitions (tagger/crf.py's second form)
# before and after, 1 thread pinned to core 0, the other core's search paused (SIGSTOP) for the
# duration and the pause logged. before = a worktree of baf3ab7 (the first CRFLoss, on flair's
# pair scores, and the reprojection), after = the working tree. Processes alternate.
set -u
cd /work/main
BEFORE=/work/scratch/before
OUT=docs/experiments/tagger-speed/crf2.log
SEARCH=$(pgrep -f "bin/search-lm" | tr '\n' ' ')
[ -n "$SEARCH" ] && kill -STOP $SEARCH
echo "paused search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
sleep 20
{
echo "# start $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"
echo "# crf_loss.py, after (the loss alone; flair's ViterbiLoss timed with the pair scores it needs)"
taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/crf_loss.py
for round in 1 2; do
  echo "# round $round: pooled_flair.py, the 2,000-sentence CoNLL-2000 slice, 3 epochs: before (baf3ab7), then after"
  .venv/bin/python $BEFORE/bench/pooled_flair.py --data ../shared/data/conll2000 --sentences 2000 --epochs 3 --core 0 2>/dev/null | tail -n 1
  .venv/bin/python bench/pooled_flair.py --data ../shared/data/conll2000 --sentences 2000 --epochs 3 --core 0 2>/dev/null | tail -n 1
done
echo "# after: tagger_epoch.py --match-params (flair_stock: flair's CRF module, loss, decoder and reprojection)"
taskset -c 0 .venv/bin/python bench/tagger_epoch.py --match-params --threads 1 2>/dev/null | tail -n 1
echo "# GEMM peaks, 1 thread, 2048^3: $(taskset -c 0 .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); from harness import gemm_peaks; print(gemm_peaks())" 2>/dev/null)"
echo "# end $(date -u +%FT%TZ) loadavg $(cat /proc/loadavg)"
} >> $OUT 2>&1
[ -n "$SEARCH" ] && kill -CONT $SEARCH
echo "resumed search pids [$SEARCH] at $(date -u +%FT%TZ)" >> /work/runs/study30e/pauses.txt
