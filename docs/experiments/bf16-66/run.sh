#!/bin/bash
# bf16 against fp32 at equal steps, 2 seeds each, one thread pinned to core $CORE, the two precisions
# alternating (issue 66, item 3). Small on purpose: a first-order DARTS search (batch 64, 2 epochs of 4
# batches), LM retraining of DARTS_V2 at 200 (2 epochs of 20 batches), a tagger on 1,500 CoNLL-2000
# sentences (2 epochs, GloVe 50d, hidden 128). Run from the checkout's root; OUT keeps the runs.
set -u
CORE=${CORE:-1}
OUT=${OUT:-/tmp/bf16-66}
DATA=${DATA:-../shared/data}
PY=${PY:-python}
SMALL=${SMALL:-$OUT/conll2000-small}  # train.txt: the first 1,500 sentences; test.txt: the first 500
mkdir -p "$OUT"
run() { echo "$ $*" >&2; taskset -c "$CORE" "$@" >/dev/null 2>>"$OUT/stderr.log" || echo "failed: $*" >&2; }
echo "start $(date -u +%FT%TZ) $(cat /proc/loadavg)"
for seed in 1 2; do
  for p in fp32 bf16; do
    run $PY bin/search-lm --data "$DATA/ptb" --order 1 --epochs 2 --max-batches-per-epoch 4 --eval-batches 10 \
      --batch-size 64 --seed $seed --precision $p --threads 1 --run-dir "$OUT/search-$p-s$seed"
    run $PY bin/train-lm --data "$DATA/ptb" --cell darts_v2 --emsize 200 --epochs 2 --max-batches-per-epoch 20 \
      --eval-batches 20 --seed $seed --precision $p --threads 1 --run-dir "$OUT/lm-$p-s$seed"
    run $PY bin/train-tagger --corpus conll2000 --data "$SMALL" --embeddings glove:glove-6b-50d --hidden-size 128 \
      --max-epochs 2 --seed $seed --precision $p --threads 1 --run-dir "$OUT/tagger-$p-s$seed"
  done
done
echo "end $(date -u +%FT%TZ) $(cat /proc/loadavg)"
