#!/bin/bash
# The pooled-Flair slice (CoNLL-2000, first 2,000 training sentences, 3 epochs, DARTS_V2 at hidden 64,
# core 0, one thread), before (8a670ec, a worktree outside the repository given this C++ build) and
# after (the working tree), two rounds alternating. Run from the repository root with the venv active.
set -e
BEFORE=${BEFORE:-/work/wt-8a670ec}
OUT=docs/experiments/pooled-flair-2
for round in 1 2; do
  for side in after before; do
    dir=.; [ $side = before ] && dir=$BEFORE
    echo "== round $round $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd $dir && python bench/pooled_flair.py --data /work/shared/data/conll2000 --sentences 2000 --epochs 3 --core 0)
  done
done
