# mixed_node_forward: row by row over all edges (cur) against edge by edge (jouter); the C++ steps in both.
PEAKS="import sys; sys.path.insert(0, 'bench'); import torch; torch.set_num_threads(1); from harness import gemm_peaks; print('GEMM peaks (GFLOP/s, 1 thread):', gemm_peaks())"
. /work/main/.venv/bin/activate; cd /work/main
taskset -c 0 python -c "$PEAKS"
echo "start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
for round in $(seq 1 ${ROUNDS:-3}); do for v in cur jouter; do
  cp /work/scratch/so_$v.so nas/fast/_fused_kernels.cpython-311-x86_64-linux-gnu.so
  echo -n "$v "; taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference $EXTRA | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['fp32_gemm_peak_gflop_s'], d.get('order1_fast_fraction_of_peak'))"
done; done
cp /work/scratch/so_cur.so nas/fast/_fused_kernels.cpython-311-x86_64-linux-gnu.so
taskset -c 0 python -c "$PEAKS"
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
