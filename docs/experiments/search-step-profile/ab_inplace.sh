# A/B of nas/fast/search_loop.py before (orig: saved activations copied into one array) and after (new: the products kept, sigma(c) in place), files in /tmp; alternating, three rounds.
cd /work/main && . .venv/bin/activate
cat /proc/loadavg
for round in 1 2 3; do for v in orig new; do
  cp /tmp/search_loop_$v.py nas/fast/search_loop.py
  echo -n "$v "; taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['fp32_gemm_peak_gflop_s'], d['order1_fast_fraction_of_peak'])"
done; done
cat /proc/loadavg
cp /tmp/search_loop_new.py nas/fast/search_loop.py
