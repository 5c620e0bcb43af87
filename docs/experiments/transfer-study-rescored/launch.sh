#!/bin/bash
# Transfer study re-run (issue 55), from the worktree /work/study at bf88f8b: CoNLL-2000 and WNUT-17, as docs/experiments/transfer-study/README.txt, from the saved files.
cd /work/study && . /work/main/.venv/bin/activate
R=docs/experiments/retrain-random-cells/random_1267_4.json
ARGS="--embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward"
core0() {
  taskset -c 0 bin/transfer --cells darts_search_h64,enas_search_h64,lstm --corpora conll2000:/work/shared/data/conll2000 \
    --seeds 3 --hidden-size 128 --threads 1 --time-budget 12 --run-dir /work/runs/conll2000-a -- $ARGS --max-epochs 3
}
core1() {
  taskset -c 1 bin/transfer --cells $R,darts_v2 --corpora conll2000:/work/shared/data/conll2000 \
    --seeds 3 --hidden-size 128 --threads 1 --time-budget 12 --run-dir /work/runs/conll2000-b -- $ARGS --max-epochs 3
  taskset -c 1 bin/transfer --cells enas_search_h64,darts_search_h64,$R,darts_v2,lstm --random-cells random_1267_4 --corpora wnut17:/work/shared/data/wnut17 \
    --seeds 3 --hidden-size 128 --threads 1 --time-budget 8 --run-dir /work/runs/wnut17 -- $ARGS --max-epochs 8
}
echo "start $(date -u +%FT%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
core0 > /work/runs/core0.log 2>&1 &
core1 > /work/runs/core1.log 2>&1 &
wait
echo "end $(date -u +%FT%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
