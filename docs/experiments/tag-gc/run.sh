#!/bin/bash
# bin/tag with and without the loaded model frozen out of the cyclic garbage collector: BEFORE (a worktree
# of the commit before, outside the repository, given the same C++ build) against the working tree,
# alternating, two rounds, core 0, one thread. MODELS: run directories (a pooled-Flair and a words-alone
# tagger trained on the CoNLL-2000 slice); TEXT: the CoNLL-2000 test sentences, tokenized, one a line
# (2,012); ONE: its first line alone (the command's start-up: imports and loading the model).
# Run from the repository root with the venv active.
set -e
for model in $MODELS; do
  for round in 1 2; do
    for side in after before; do
      dir=$PWD; [ $side = before ] && dir=$BEFORE
      for input in $ONE $TEXT; do
        start=$(date +%s.%N)
        taskset -c 0 env OMP_NUM_THREADS=1 python $dir/bin/tag --model $model --tokenized --threads 1 $input --out /tmp/tag-gc-$side.conll 2>/dev/null
        end=$(date +%s.%N)
        echo "$(basename $model) round $round $side $(basename $input) $(echo "$end - $start" | bc) s load $(cut -d' ' -f1 /proc/loadavg)"
      done
    done
    cmp /tmp/tag-gc-after.conll /tmp/tag-gc-before.conll && echo "$(basename $model) round $round: the same output"
  done
done
