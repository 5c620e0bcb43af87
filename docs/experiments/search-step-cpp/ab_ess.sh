# ESS joint search step, first order, H = 64: d0be6d6 (before the ESS work, its own build) / orig (ec4b416's
# Python steps) / new (the C++ steps), processes alternating, 1 thread pinned to core 0.
PEAKS="import sys; sys.path.insert(0, 'bench'); import torch; torch.set_num_threads(1); from harness import gemm_peaks; print('GEMM peaks (GFLOP/s, 1 thread):', gemm_peaks())"
PARSE="import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['order1_fast_tokens_per_s'])"
. /work/main/.venv/bin/activate
cd /work/main && taskset -c 0 python -c "$PEAKS"
echo "start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
for round in $(seq 1 ${ROUNDS:-3}); do
  echo -n "d0be6d6 "; (cd /work/scratch/wt-d0be6d6 && taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference --method ess --nhid 64 | python3 -c "$PARSE")
  for v in orig new; do
    cp /tmp/search_loop_$v.py nas/fast/search_loop.py
    echo -n "$v "; taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference --method ess --nhid 64 | python3 -c "$PARSE"
  done
done
cp /tmp/search_loop_new.py nas/fast/search_loop.py
taskset -c 0 python -c "$PEAKS"
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
