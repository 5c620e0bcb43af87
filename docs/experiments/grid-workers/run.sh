#!/bin/bash
# Issue 34: wall time of issue 19's transfer command, --workers 2 against --workers 1, seeds 1.
cd /work/main
for w in 2 1; do
  echo "workers $w start $(date -u +%FT%T) load $(cat /proc/loadavg)"
  s=$(date +%s.%N)
  .venv/bin/python bin/transfer --cells lstm,darts_v2,random_search_h64,random_1_1 \
    --corpora conll2000:data/conll2000 --seeds 1 --hidden-size 128 --threads 1 --time-budget 12 \
    --workers $w --run-dir /work/runs/timing34/w$w \
    -- --embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward --max-epochs 3 > /work/runs/timing34/w$w.out 2> /work/runs/timing34/w$w.err
  rc=$?
  e=$(date +%s.%N)
  echo "workers $w rc $rc end $(date -u +%FT%T) wall $(echo "$e - $s" | bc) s load $(cat /proc/loadavg)"
done
