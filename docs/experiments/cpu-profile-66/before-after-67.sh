#!/bin/bash
# (1) issue 66 item 3: the search's bf16 against fp32 at idle, seeds 1 and 2, alternating, core 0.
# (2) issue 67 item 6: base 530ebc9 against main, alternating, core 0: search step (orders 1, 2) and the BiRNN.
PY=/work/main/.venv/bin/python; OUT=/work/measure/bf16; mkdir -p $OUT
echo "start $(date -u +%FT%TZ) $(cat /proc/loadavg)"
cd /work/main; export PYTHONPATH=$PWD
for seed in 1 2; do for p in fp32 bf16; do
  rm -rf $OUT/search-$p-s$seed
  taskset -c 0 $PY bin/search-lm --data /work/shared/data/ptb --order 1 --epochs 2 --max-batches-per-epoch 4 --eval-batches 10 \
      --batch-size 64 --seed $seed --precision $p --threads 1 --run-dir $OUT/search-$p-s$seed > /dev/null 2>> $OUT/stderr.log || echo "failed $p $seed"
done; done
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
for round in 1 2; do for tree in /work/base-530 /work/main; do
  cd $tree; export PYTHONPATH=$PWD
  echo "tree $tree round $round"
  taskset -c 0 $PY bench/search_step.py --threads 1 --orders 1 2 --repeats 3 --no-reference 2>/dev/null | tail -1
  taskset -c 0 $PY -c "
import sys, runpy
sys.argv = ['bench/birnn.py', '--threads', '1', '--repeats', '3', '--runs', 'frozen,lstm']
sys.path.insert(0, 'bench')
import nas.fast.kernels as k
assert k.compiled() is not None  # base's bench looked for the kernels before their first load
runpy.run_path('bench/birnn.py', run_name='__main__')" 2>/dev/null | tail -1
done; done
cd /work/main; export PYTHONPATH=$PWD; taskset -c 0 $PY bench/birnn.py --threads 1 --repeats 3 --cell ess_joint_search_h64 --runs frozen_autograd,lstm 2>/dev/null | tail -1
echo "end $(date -u +%FT%TZ) $(cat /proc/loadavg)"
