#!/bin/bash
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/bf16-66}; DATA=${DATA:-../shared/data}; PY=${PY:-python}; SMALL=$OUT/conll2000-small
# (run as it was: after the fp32 search of seed 2 ended)
for p in fp32 bf16; do
  taskset -c 1 $PY bin/train-lm --data "$DATA/ptb" --cell darts_v2 --emsize 200 --epochs 2 --max-batches-per-epoch 20 \
      --eval-batches 20 --seed 2 --precision $p --threads 1 --run-dir "$OUT/lm-$p-s2" >/dev/null 2>>$OUT/stderr.log
  taskset -c 1 $PY bin/train-tagger --corpus conll2000 --data "$SMALL" --embeddings glove:glove-6b-50d --hidden-size 128 \
      --max-epochs 2 --seed 2 --precision $p --threads 1 --run-dir "$OUT/tagger-$p-s2" >/dev/null 2>>$OUT/stderr.log
done
echo "end $(date -u +%FT%TZ) $(cat /proc/loadavg)" >> $OUT/run.log
