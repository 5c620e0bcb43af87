#!/usr/bin/env bash
# The GPU checks of issue 58 and the project's GPU checklist as one call of the device tool (an H100 or
# H200 with 16 cores), about 7 minutes. Run from the checkout's root, carrying .whl/ (built by
# docs/experiments/gpu-2026-11-26/wheels.sh) and .gpu/ (PTB in .gpu/data/ptb; the original DARTS rnn/
# port in .gpu/darts_original, see bench/search_step.py --original):
#
#     LIMIT=540 bash bench/gpu.sh [tests search-step birnn tagger searches]   (all five by default)
#
# In the checklist's order: the benchmarks (the GPU otherwise idle: the BiRNN and the tagger epoch on the
# Triton loop first, then the search step side by side with the original DARTS code, whose compiled step
# needs about 150 s), then the GPU tests (the float64 test of the NaN, the Triton kernels against the
# definition) beside the papers' search with three seeds for 4 epochs, for the time left.
#
# Every part runs under its own timeout, cut to what is left of LIMIT seconds; everything lands in
# $OUT/records.tar.gz (or /tmp/records.tar.gz without $OUT) and the last lines summarise.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PARTS=${*:-tests search-step birnn tagger searches}
R=/tmp/records; mkdir -p $R; OUT=${OUT:-/tmp}
T0=$SECONDS; LIMIT=${LIMIT:-540}
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a $R/steps.log; }
want() { [[ " $PARTS " == *" $1 "* ]]; }
# within(SECONDS, cmd...): cmd under timeout (SIGINT: a search checkpoints and ends), cut to what is left of LIMIT.
within() { local left=$((LIMIT - (SECONDS - T0))) limit=$1; shift; [ $left -lt $limit ] && limit=$left
           [ $limit -lt 10 ] && { echo "skipped (no time left): $*" | tee -a $R/steps.log; return 124; }; timeout -s INT $limit "$@"; }
finish() { for d in /tmp/s-*; do [ -d $d ] && mkdir -p $R/${d#/tmp/} && cp $d/*.json* $R/${d#/tmp/}/ 2>/dev/null; done
           tar -czf $OUT/records.tar.gz -C /tmp records; }
trap finish EXIT
SEARCH="--data .gpu/data/ptb --method darts --device cuda"  # the papers' size: emsize = nhid = 300, batch 256, order 1

step "machine; parts: $PARTS"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; cat /proc/loadavg
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, 'triton', triton.__version__)"
  git log --oneline -1; } > $R/machine.txt 2>&1
cat $R/machine.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $R/install.log 2>&1 \
    || { tail -5 $R/install.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
# the C++ kernels (CPU code; the float64 test compares the GPU with the CPU's fused path) build on cores 8-15
(taskset -c 8-15 python3 -m pip install --no-index --no-deps --no-build-isolation -e . >> $R/install.log 2>&1
 echo "install rc $?" >> $R/install.log) &
INSTALL=$!

if want birnn; then  # the compiled step (cuda-graphs' frozen, 0.052 s on 2026-11-27's H200) costs 87 s compiling: left out
  step "frozen BiRNN, the whole loop as two Triton kernels (cuda-loop), against cuDNN's LSTM"
  within 80 taskset -c 0 python3 bench/birnn.py --device cuda --runs frozen_triton_loop,frozen_autograd,lstm,lstm_padded \
      >> $R/bench.jsonl 2>> $R/bench.err; echo "birnn rc $?"
fi
if want tagger; then
  step "a tagger epoch against flair's LSTM at equal parameters: cuda-loop, and the definition op by op"
  within 120 taskset -c 0 python3 bench/tagger_epoch.py --device cuda --match-params --sentences 1000 --repeats 2 \
      --predict-repeats 1 --backends cuda-loop,torch >> $R/bench.jsonl 2>> $R/bench.err; echo "tagger_epoch rc $?"
fi
if want search-step; then
  step "search step on core 0, the GPU otherwise idle: ours (compiled steps + graphs, graphs alone) against the original DARTS code"
  within 160 taskset -c 0 python3 bench/search_step.py --device cuda --batch-size 256 --orders 1 --original .gpu/darts_original \
      --ours fast-compiled fast --no-reference --repeats 3 >> $R/bench.jsonl 2>> $R/bench.err; echo "search_step rc $?"
fi
grep -E "Error|error:" $R/bench.err 2>/dev/null | tail -3

wait $INSTALL; tail -1 $R/install.log
if want searches; then
  step "the papers' search, 3 seeds at once for 4 epochs with the health check (the NaN of 2026-11-26); the GPU tests beside them"
  for s in 1 2 3; do
    (within 240 taskset -c $s python3 bin/search-lm $SEARCH --epochs 4 --seed $s --run-dir /tmp/s-three-$s > $R/search-three-$s.log 2>&1) &
  done
fi
if want tests; then
  within 200 env OMP_NUM_THREADS=1 taskset -c 4-15 python3 -m pytest -v -p no:cacheprovider -rfEs tests/test_step_graphs.py \
      tests/test_fused_search_cell.py tests/test_kill_resume.py tests/test_backends.py tests/test_triton_loop.py \
      -k "gpu or cuda or replay or recorded" \
      > $R/tests-gpu.log 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|ERROR|SKIPPED" $R/tests-gpu.log | cut -c1-150 | tail -15
fi
wait
for s in 1 2 3; do grep -E "^epoch" $R/search-three-$s.log 2>/dev/null | cut -c1-110; done
step done
cut -c1-600 $R/bench.jsonl 2>/dev/null
