#!/bin/bash
# From 2026-11-29 04:50: β-DARTS seed 2 converged (epoch 34, --early-stop converged), the first search at this scale to
# end converged; item 4 asks for the converged cell: its PTB retraining, then CoNLL-2000 and WNUT-17 with 5 seeds, as the others.
CORE=1; . /work/runs/q/lib.sh
C=/work/runs/cells/beta_darts_s2.json
retrain beta_darts_s2 --cell $C
tr() {  # corpus : bin/transfer of the converged cell alone, 5 seeds, into /work/runs/t69/core1b/CORPUS (gather.sh adds it)
  local corpus=$1 budget=12 epochs=3
  [ $corpus = wnut17 ] && { budget=8; epochs=8; }
  local run=/work/runs/t69/core1b/$corpus
  mkdir -p /work/runs/t69/core1b
  log "transfer $corpus $C"
  cd /work/t69-code && nice -n 5 taskset -c $CORE $PY bin/transfer --cells $C \
    --corpora $corpus:/work/shared/data/$corpus --seeds 5 --hidden-size 128 --threads 1 --time-budget $budget --run-dir $run -- \
    --embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward --max-epochs $epochs >> $run.out 2>&1
  log "end transfer $corpus rc $?"
}
tr conll2000
tr wnut17
