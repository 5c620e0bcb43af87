#!/usr/bin/env bash
# The third call (second session, same day): the test suite with the time it needs, each test's name in its log
# (-v) so that a cut still names its failures; meanwhile the checklist's search on PTB at the paper's size,
# interrupted and resumed on the GPU (the resume that failed in call 1) until 5 minutes of training in all.
# Carried: .whl/ (built by wheels.sh) and .gpu/data/ptb. Everything goes into $OUT/records.tar.gz.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
R=/tmp/records; mkdir -p $R
T0=$SECONDS
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a $R/steps.log; }
within() { local left=$((545 - (SECONDS - T0))) limit=$1; shift; [ $left -lt $limit ] && limit=$left
           [ $limit -lt 10 ] && { echo "skipped (no time left): $*"; return 124; }; timeout $limit "$@"; }
finish() { cp /tmp/gpu-search/*.json* $R/ 2>/dev/null; tar -czf $OUT/records.tar.gz -C /tmp records; }
trap finish EXIT

step install
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv; nproc; cat /proc/loadavg
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > $R/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $R/install.log 2>&1 || { tail -5 $R/install.log; exit 1; }
export PYTHONPATH=/tmp/site
(taskset -c 2-15 python3 -m pip install --no-index --no-deps --no-build-isolation -e . >> $R/install.log 2>&1; echo "install rc $?" >> $R/install.log) &
INSTALL=$!

step "search on core 0: first-order DARTS, PTB, paper's size, SIGINT at 150 s, then resumed to 5 minutes in all"
(taskset -c 0 timeout -s INT 150 python3 bin/search-lm --data .gpu/data/ptb --method darts --device cuda --time-budget 5 \
     --run-dir /tmp/gpu-search > $R/search.log 2>&1; echo "search rc $?" >> $R/search.log
 within 240 taskset -c 0 python3 bin/search-lm --resume /tmp/gpu-search --time-budget 5 >> $R/search.log 2>&1
 echo "resume rc $?" >> $R/search.log) &
SEARCH=$!

wait $INSTALL; tail -1 $R/install.log
python3 -c "import flair, nas.fast.kernels as k; print('flair', flair.__version__, 'C++ kernels built:', k.compiled() is not None)" 2>&1 | tail -1
step "tests (-m 'not slow'), 13 workers on cores 3-15, -v"
within 420 env OMP_NUM_THREADS=1 taskset -c 3-15 python3 -m pytest -v -n 13 -p no:cacheprovider --timeout 200 -rfE > $R/tests.log 2>&1
echo "tests rc $?"
grep -E "^(FAILED|ERROR)" $R/tests.log | cut -c1-220; tail -1 $R/tests.log
step "waiting for the search"
wait $SEARCH; grep -E "rc|genotype|error" $R/search.log | tail -6
step done
