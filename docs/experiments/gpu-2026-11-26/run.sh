#!/usr/bin/env bash
# The GPU checklist in one call of the device tool (one H100, 16 cores, no network), as it ran.
# Carried beside the checkout: .whl/ (wheels of flair, seqeval and the dependencies the machine's image
# lacks, transformers 4 for flair; gensim, Ray and the docs tools left out to fit the 64 MiB transfer)
# and .gpu/data/ptb (PTB). Everything it writes goes into $OUT/records.tar.gz; the last lines summarise.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
R=/tmp/records; mkdir -p $R
T0=$SECONDS
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a $R/steps.log; }
# within(LIMIT, cmd...): cmd under timeout LIMIT, cut to what is left of 560 s (the call's limit is 600); skipped under 10 s.
within() { local left=$((560 - (SECONDS - T0))) limit=$1; shift; [ $left -lt $limit ] && limit=$left
           [ $limit -lt 10 ] && { echo "skipped (no time left): $*"; return 124; }; timeout $limit "$@"; }
finish() { cp /tmp/gpu-search/*.json* $R/ 2>/dev/null; tar -czf $OUT/records.tar.gz -C /tmp records; }
trap finish EXIT

step machine
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; cat /proc/loadavg
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"; } > $R/machine.txt 2>&1
cat $R/machine.txt

step "install: the carried wheels, then README's second line offline (--no-index --no-deps)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $R/install.log 2>&1 || { tail -5 $R/install.log; exit 1; }
export PYTHONPATH=/tmp/site
python3 -m pip install --no-index --no-deps --no-build-isolation -e . >> $R/install.log 2>&1; echo "install rc $?"
python3 -c "import flair, transformers, seqeval, nas.fast.kernels as k; print('flair', flair.__version__, 'transformers', transformers.__version__, 'C++ kernels built:', k.compiled() is not None)" 2>&1 | tail -1

step "tests (-m 'not slow', 10 workers on cores 4-15) in the background"
(OMP_NUM_THREADS=1 taskset -c 4-15 timeout 300 python3 -m pytest -q -n 10 -p no:cacheprovider --timeout 240 > $R/tests.log 2>&1; echo "tests rc $?" >> $R/tests.log) &
TESTS=$!

step "search: first-order DARTS on PTB at the paper's size (emsize = nhid = 300, batch 256), interrupted at 100 s"
taskset -c 0 timeout -s INT 100 python3 bin/search-lm --data .gpu/data/ptb --method darts --device cuda --time-budget 30 \
    --run-dir /tmp/gpu-search > $R/search.log 2>&1; echo "search rc $?"; tail -3 $R/search.log
step "search: resumed until 3 minutes of training in all (--time-budget counts over resumes)"
within 170 taskset -c 0 python3 bin/search-lm --resume /tmp/gpu-search --time-budget 3 >> $R/search.log 2>&1; echo "resume rc $?"; tail -4 $R/search.log

step "torchrun --nproc_per_node 1, NCCL: one search step"
within 90 taskset -c 0 torchrun --standalone --nproc_per_node 1 bin/search-lm --data .gpu/data/ptb --method darts --device cuda \
    --epochs 1 --max-batches-per-epoch 1 --eval-batches 2 --hessian-iterations 0 --run-dir /tmp/gpu-torchrun > $R/torchrun.log 2>&1
echo "torchrun rc $?"; tail -3 $R/torchrun.log; cp /tmp/gpu-torchrun/log.jsonl $R/torchrun-log.jsonl 2>/dev/null
step "waiting for the tests"
wait $TESTS; tail -15 $R/tests.log

step "benchmarks, GPU otherwise idle"
within 100 taskset -c 0 python3 bench/search_step.py --device cuda --batch-size 256 --orders 1 2 --autograd --repeats 5 > $R/bench.jsonl 2> $R/bench.err; echo "search_step rc $?"
within 60 taskset -c 0 python3 bench/search_step.py --device cuda --batch-size 256 --orders 1 --precision bf16 --repeats 5 >> $R/bench.jsonl 2>> $R/bench.err; echo "search_step bf16 rc $?"
within 60 taskset -c 0 python3 bench/search_step.py --device cuda --batch-size 256 --orders 1 --method ess --no-reference --repeats 5 >> $R/bench.jsonl 2>> $R/bench.err; echo "search_step ess rc $?"
within 45 taskset -c 0 python3 bench/birnn.py --device cuda >> $R/bench.jsonl 2>> $R/bench.err; echo "birnn rc $?"
within 45 taskset -c 0 python3 bench/birnn.py --device cuda --cell ess_ptb >> $R/bench.jsonl 2>> $R/bench.err; echo "birnn ess rc $?"
within 90 taskset -c 0 python3 bench/tagger_epoch.py --device cuda --match-params --sentences 2000 --repeats 2 --predict-repeats 2 >> $R/bench.jsonl 2>> $R/bench.err; echo "tagger_epoch rc $?"
tail -3 $R/bench.err

step done
cut -c1-400 $R/bench.jsonl
