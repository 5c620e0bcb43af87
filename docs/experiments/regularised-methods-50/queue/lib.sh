#!/bin/bash
# Per-core queue of issue 69's long runs. Every step is resumable; rerun the core's script to continue.
PY=/work/main/.venv/bin/python
DATA=/work/shared/data/ptb
log() { echo "$(date -u +%FT%T) core $CORE: $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >> /work/runs/q/queue.log; }
search() {  # name code-dir args... : a search run in /work/runs/NAME (or an existing run dir given as name path)
  local name=$1 code=$2; shift 2
  local run=/work/runs/$name
  [[ $name == /* ]] && run=$name
  if [ -f $run/metrics.json ]; then return; fi
  if [ -f $run.pid ] && kill -0 $(cat $run.pid) 2>/dev/null; then
    log "waiting for $run (pid $(cat $run.pid))"; while kill -0 $(cat $run.pid) 2>/dev/null; do sleep 30; done
    [ -f $run/metrics.json ] && { log "$run finished"; return; }
  fi
  log "start $run"
  cd $code
  if [ -f $run/config.json ]; then
    nice -n 5 taskset -c $CORE $PY bin/search-lm --resume $run --threads 1 >> $run.out 2>&1 &
  else
    nice -n 5 taskset -c $CORE $PY bin/search-lm --data $DATA --emsize 64 --nhid 64 --batch-size 64 --bptt 35 \
      --eval-batch-size 64 --nodes 8 --threads 1 --order 1 "$@" --run-dir $run >> $run.out 2>&1 &
  fi
  echo $! > $run.pid
  wait $!; log "end $run rc $?"
}
R=/work/main/docs/experiments/retrain-random-cells
transfer() {  # corpus cells : bin/transfer of these cells, 5 seeds, into /work/runs/t69/coreN/CORPUS (code: /work/t69-code)
  local corpus=$1 cells=$2 budget=12 epochs=3
  [ $corpus = wnut17 ] && { budget=8; epochs=8; }
  local run=/work/runs/t69/core$CORE/$corpus
  local randoms=$(echo $cells | tr , '\n' | grep -o 'random_1267_[0-9]' | paste -sd, -)
  local flag=""; [ -n "$randoms" ] && flag="--random-cells $randoms"
  log "transfer $corpus $cells"
  cd /work/t69-code && nice -n 5 taskset -c $CORE $PY bin/transfer --cells $cells $flag \
    --corpora $corpus:/work/shared/data/$corpus --seeds 5 --hidden-size 128 --threads 1 --time-budget $budget --run-dir $run -- \
    --embeddings glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward --max-epochs $epochs >> $run.out 2>&1
  log "end transfer $corpus rc $?"
}
retrain() {  # name cell-args... : bin/train-lm at the regularised study's equal-token budget (7 epochs, emsize 128, seed 1267)
  local name=$1; shift
  local run=/work/runs/r69/$name
  mkdir -p /work/runs/r69
  if [ -f $run/metrics.json ]; then return; fi
  log "retrain $name"
  cd /work/t69-code
  if [ -f $run/config.json ]; then
    nice -n 5 taskset -c $CORE $PY bin/train-lm --resume $run --threads 1 >> $run.out 2>&1
  else
    nice -n 5 taskset -c $CORE $PY bin/train-lm --data $DATA --emsize 128 --epochs 7 --seed 1267 --threads 1 "$@" --run-dir $run >> $run.out 2>&1
  fi
  log "end retrain $name rc $?"
}
