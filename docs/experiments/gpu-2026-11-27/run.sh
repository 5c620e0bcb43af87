#!/usr/bin/env bash
# Issue 58's GPU measurements in one call of the device tool (one H200, 16 cores), in the ~5 minutes of device
# time left to the session. Carried beside the checkout: .whl/ (docs/experiments/gpu-2026-11-26/wheels.sh) and .gpu/
# (PTB in .gpu/data/ptb; the original DARTS rnn/ port in .gpu/darts_original). Records in $OUT/records.tar.gz.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export CXX=no-compiler-here  # the C++ kernels are CPU code: not compiled here (that takes a minute), the PyTorch path instead
R=/tmp/records; mkdir -p $R
T0=$SECONDS; LIMIT=${LIMIT:-250}
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a $R/steps.log; }
# within(SECONDS, cmd...): cmd under timeout (SIGINT: a search checkpoints and ends), cut to what is left of LIMIT.
within() { local left=$((LIMIT - (SECONDS - T0))) limit=$1; shift; [ $left -lt $limit ] && limit=$left
           [ $limit -lt 10 ] && { echo "skipped (no time left): $*" | tee -a $R/steps.log; return 124; }; timeout -s INT $limit "$@"; }
finish() { for d in /tmp/s-*; do [ -d $d ] && mkdir -p $R/${d#/tmp/} && cp $d/*.json* $R/${d#/tmp/}/ 2>/dev/null; done
           tar -czf $OUT/records.tar.gz -C /tmp records; }
trap finish EXIT
PAPER="--data .gpu/data/ptb --method darts --device cuda --hessian-iterations 0"  # emsize = nhid = 300, batch 256, order 1

step machine
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; cat /proc/loadavg
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, 'triton', triton.__version__)"; } > $R/machine.txt 2>&1
cat $R/machine.txt
export PYTHONPATH=$PWD
(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $R/install.log 2>&1
 echo "wheels rc $?" >> $R/install.log) &
WHEELS=$!

step "search step on core 0, GPU otherwise idle: ours (graphs + compiled steps = search-lm's default; graphs alone; eager) against the original DARTS code"
within 100 taskset -c 0 python3 bench/search_step.py --device cuda --batch-size 256 --orders 1 --original .gpu/darts_original \
    --ours fast-compiled fast eager --no-reference --repeats 3 > $R/bench.jsonl 2> $R/bench.err; echo "search_step rc $?"
tail -2 $R/bench.err | cut -c1-300

step "the papers' search (PTB, H = 300, batch 256, first order, validation each epoch, no Hessian check), one seed alone"
within 60 taskset -c 0 python3 bin/search-lm $PAPER --epochs 50 --seed 1 --run-dir /tmp/s-alone > $R/search-alone.log 2>&1
echo "alone rc $?"; grep -E "^epoch" $R/search-alone.log | cut -c1-120

step "three seeds at once on the GPU (the same command), and the GPU tests on cores 4-7 beside them"
for s in 1 2 3; do
  (within 70 taskset -c $s python3 bin/search-lm $PAPER --epochs 50 --seed $s --run-dir /tmp/s-three-$s > $R/search-three-$s.log 2>&1) &
done
wait $WHEELS; tail -1 $R/install.log
(export PYTHONPATH=/tmp/site:$PWD; within 70 env OMP_NUM_THREADS=1 taskset -c 4-7 python3 -m pytest -v -p no:cacheprovider -rfEs \
    tests/test_step_graphs.py tests/test_fused_search_cell.py -k "gpu or cuda or replay or recorded or replays" \
    > $R/tests-gpu.log 2>&1; echo "gpu tests rc $?" >> $R/tests-gpu.log) &
wait
grep -E "PASSED|FAILED|ERROR|rc " $R/tests-gpu.log | cut -c1-150 | tail -8
for s in 1 2 3; do grep -E "^epoch" $R/search-three-$s.log | cut -c1-100; done
step done
cut -c1-700 $R/bench.jsonl
