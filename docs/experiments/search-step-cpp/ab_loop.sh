# A/B of nas/fast/search_loop.py: orig (the Python steps, HEAD~3) against new (the C++ steps), the same .so
# (it holds both). Processes alternate; 1 thread pinned to core 0. EXTRA: the benchmark's extra flags.
cd /work/main && . .venv/bin/activate
taskset -c 0 python -c "import sys; sys.path.insert(0, 'bench'); import torch; torch.set_num_threads(1); from harness import gemm_peaks; print('GEMM peaks (GFLOP/s, 1 thread):', gemm_peaks())"
echo "start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
for round in $(seq 1 ${ROUNDS:-3}); do for v in orig new; do
  cp /tmp/search_loop_$v.py nas/fast/search_loop.py
  echo -n "$v "; taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats ${REPEATS:-5} --no-reference $EXTRA | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['fp32_gemm_peak_gflop_s'], d.get('order1_fast_fraction_of_peak'))"
done; done
taskset -c 0 python -c "import sys; sys.path.insert(0, 'bench'); import torch; torch.set_num_threads(1); from harness import gemm_peaks; print('GEMM peaks (GFLOP/s, 1 thread):', gemm_peaks())"
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
cp /tmp/search_loop_new.py nas/fast/search_loop.py
