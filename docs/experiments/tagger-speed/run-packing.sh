#!/bin/bash
# Issue 35, 2026-11-25: the loop weights packed for oneDNN only where that pays, measured
# (`nas.fast.gemm.pack_for_steps`: from the row count at which oneDNN leads, where what it saves over
# the batch's steps exceeds the packing), against packed wherever oneDNN led at the batch's first
# step's rows. Before = /work/wt_before (483ae02, its C++ kernels built there), after = /work/main.
#   bench/tagger_epoch.py --match-params: DARTS_V2 at hidden 256 against flair's BiLSTM at hidden 506
#     (the same recurrent parameter count), 5,000 synthetic sentences, 100-d vectors.
#   bench/birnn.py: DARTS_V2 BiRNN forward + backward (32 sentences, input 4,096, hidden 512) against
#     nn.LSTM, 1 thread; then 2 threads on both cores, one round.
# Processes alternating, two rounds. One thread pinned to core 0 (2 threads: cores 0 and 1), nothing
# else running: issue 30's I-DARTS search is paused with SIGSTOP throughout (logged in its run folder).
PY=/work/main/.venv/bin/python
PAUSES=/work/runs/study30d/pauses.txt
SEARCH=$(pgrep -f "bin/search-lm --resume /work/runs/study30d/idarts" | head -1)
[ -n "$SEARCH" ] && kill -STOP $SEARCH && echo "paused $(date -u +%FT%T) for docs/experiments/tagger-speed/run-packing.sh" >> $PAUSES
trap '[ -n "$SEARCH" ] && kill -CONT $SEARCH && echo "resumed $(date -u +%FT%T)" >> $PAUSES' EXIT
sleep 5
peaks() { (cd /work/main/bench && taskset -c 0 $PY -c "import harness, json; print(json.dumps({'gemm_peaks': harness.gemm_peaks(), 'loadavg': open('/proc/loadavg').read().strip()}))"); }
echo "# $(date -u +%FT%T) UTC start, loadavg $(cat /proc/loadavg)"
peaks
for round in 1 2; do
  for side in wt_before main; do
    echo "## $side tagger_epoch round $round"
    (cd /work/$side && taskset -c 0 $PY bench/tagger_epoch.py --match-params --threads 1 --repeats 2 --predict-repeats 3 2>&1 | tail -1)
    echo "## $side birnn 1 thread round $round"
    (cd /work/$side && taskset -c 0 $PY bench/birnn.py --threads 1 --repeats 9 2>&1 | tail -1)
  done
done
for side in wt_before main; do
  echo "## $side birnn 2 threads"
  (cd /work/$side && taskset -c 0,1 $PY bench/birnn.py --threads 2 --repeats 9 2>&1 | tail -1)
done
peaks
echo "# $(date -u +%FT%T) UTC end, loadavg $(cat /proc/loadavg)"
