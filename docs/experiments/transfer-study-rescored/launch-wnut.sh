#!/bin/bash
# WNUT-17 part of the transfer study re-run, split over both cores once CoNLL-2000's core 0 half had finished.
cd /work/study && . /work/main/.venv/bin/activate
R=docs/experiments/retrain-random-cells/random_1267_4.json
ARGS="--embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward"
taskset -c 1 bin/transfer --cells enas_search_h64,darts_search_h64,$R --corpora wnut17:/work/shared/data/wnut17 \
  --seeds 3 --hidden-size 128 --threads 1 --time-budget 8 --run-dir /work/runs/wnut17 -- $ARGS --max-epochs 8 > /work/runs/wnut-core1.log 2>&1 &
taskset -c 0 bin/transfer --cells darts_v2,lstm --corpora wnut17:/work/shared/data/wnut17 \
  --seeds 3 --hidden-size 128 --threads 1 --time-budget 8 --run-dir /work/runs/wnut17 -- $ARGS --max-epochs 8 > /work/runs/wnut-core0.log 2>&1 &
wait
echo "end $(date -u +%FT%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
