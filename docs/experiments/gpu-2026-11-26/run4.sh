#!/usr/bin/env bash
# The fourth call: the whole suite again after the fix of call 3's one failure (e7f1a67: a library
# caller's embeddings, built on the GPU by flair's default, were not moved to TaggerConfig's device
# before the character-LM pre-pass), with the time it needs and each test's name in its log.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
R=/tmp/records; mkdir -p $R
T0=$SECONDS
step() { echo "== [$((SECONDS - T0)) s] $*" | tee -a $R/steps.log; }
trap 'tar -czf $OUT/records.tar.gz -C /tmp records' EXIT

step install
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; cat /proc/loadavg; } > $R/machine.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $R/install.log 2>&1 || { tail -5 $R/install.log; exit 1; }
export PYTHONPATH=/tmp/site
python3 -m pip install --no-index --no-deps --no-build-isolation -e . >> $R/install.log 2>&1; echo "install rc $?"
python3 -c "import flair, torch, nas.fast.kernels as k; print('flair', flair.__version__, 'cuda', torch.cuda.is_available(), 'C++ kernels built:', k.compiled() is not None)" 2>&1 | tail -1
step "tests (-m 'not slow'), 15 workers, -v"
timeout 280 env OMP_NUM_THREADS=1 python3 -m pytest -v -n 15 -p no:cacheprovider --timeout 200 -rfE > $R/tests.log 2>&1
echo "tests rc $?"
grep -E "^(FAILED|ERROR)" $R/tests.log | cut -c1-200; tail -1 $R/tests.log
grep -E "test_kill_resume.*cuda|gpu" $R/tests.log | grep -E "PASSED|FAILED|SKIPPED" | cut -c1-160
step done
