#!/bin/bash
# Issue 69 item 4: every finished transfer run of both cores in one run dir per corpus, then bin/transfer over all cells
# (finished runs are skipped; only the report is computed). Usage: gather.sh CORPUS
set -e
corpus=$1; budget=12; epochs=3
[ $corpus = wnut17 ] && { budget=8; epochs=8; }
ALL=/work/runs/t69/all/$corpus
mkdir -p $ALL/$corpus
for core in 0 1 1b; do  # 1b: the converged beta-DARTS cell's runs (core1d.sh)
  for cell in /work/runs/t69/core$core/$corpus/$corpus/*/; do
    for seed in $cell/seed-*/; do
      [ -f $seed/metrics.json ] || continue
      dest=$ALL/$corpus/$(basename $cell)/$(basename $seed)
      [ -d $dest ] || { mkdir -p $(dirname $dest); cp -r $seed $dest; }
    done
  done
done
T=docs/experiments/retrain-random-cells
cd /work/t69-code && taskset -c ${CORE:-1} /work/main/.venv/bin/python bin/transfer \
  --cells lstm,darts_v2,darts_search_h64,/work/runs/cells/sdarts_rs_s1.json,/work/runs/cells/beta_darts_s1.json,/work/runs/cells/beta_darts_s2.json,$T/random_1267_1.json,$T/random_1267_2.json,$T/random_1267_3.json,$T/random_1267_4.json,$T/random_1267_5.json \
  --random-cells random_1267_1,random_1267_2,random_1267_3,random_1267_4,random_1267_5 \
  --corpora $corpus:/work/shared/data/$corpus --seeds 5 --hidden-size 128 --threads 1 --time-budget $budget --run-dir $ALL -- \
  --embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward --max-epochs $epochs
