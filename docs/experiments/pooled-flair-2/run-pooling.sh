#!/bin/bash
# Pooling a batch at a time (tagger/pooling.py): before (BEFORE, a worktree of the commit before it,
# outside the repository, given the same C++ build) against after (the working tree), alternating:
# prediction of the slice's test sentences (predict.py), then bench/pooled_flair.py on the slice.
# Run from the repository root with the venv active; SLICE: a folder with the slice's train.txt and test.txt.
set -e
OUT=docs/experiments/pooled-flair-2
for round in 1 2; do
  for side in after before; do
    dir=$PWD; [ $side = before ] && dir=$BEFORE
    echo "== predict round $round $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $dir && PYTHONPATH=$dir taskset -c 0 python $OLDPWD/$OUT/predict.py $SLICE 2>/dev/null | tail -1)
  done
done
for side in after before; do
  dir=$PWD; [ $side = before ] && dir=$BEFORE
  echo "== pooled_flair $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $dir && python bench/pooled_flair.py --data /work/shared/data/conll2000 --sentences 2000 --epochs 3 --core 0)
done
