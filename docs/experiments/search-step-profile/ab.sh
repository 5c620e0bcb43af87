# A/B of two builds of the C++ kernels, alternating: SO_DIR holds so_A.so (HEAD) and so_B.so (the variant); restores A.
cd "$(dirname "$0")/../../.." && . .venv/bin/activate
cat /proc/loadavg
for round in 1 2 3; do for v in A B; do
  cp "$SO_DIR"/so_$v.so nas/fast/_fused_kernels.cpython-311-x86_64-linux-gnu.so
  echo -n "$v "; taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['fp32_gemm_peak_gflop_s'], d['order1_fast_fraction_of_peak'])"
done; done
cat /proc/loadavg
cp "$SO_DIR"/so_A.so nas/fast/_fused_kernels.cpython-311-x86_64-linux-gnu.so
