#!/bin/bash
# Issue 35, tagger at equal parameters and the BiRNN: before (/work/wt_before = 6578bb1, the start of
# this session) against after (/work/main = feecdd8: gapped GEMM operands on torch.mm instead of oneDNN
# on copies; the frozen cell's time loop in C++; the forward group weights as transposed views),
# processes alternating, 2 rounds.
#   bench/tagger_epoch.py --match-params: DARTS_V2 at hidden 256 against flair's BiLSTM at the hidden
#     size with the same recurrent parameter count (506), 5,000 synthetic sentences, 100-d vectors.
#   bench/birnn.py: DARTS_V2 BiRNN forward + backward on a CoNLL-like batch (32 sentences, input
#     4,096, hidden 512) against nn.LSTM, 1 thread; then 2 threads on both cores, one round.
# One thread pinned to core 0 (2 threads: cores 0 and 1), nothing else running (issue 30's I-DARTS
# search paused with SIGSTOP).
PY=/work/main/.venv/bin/python
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
