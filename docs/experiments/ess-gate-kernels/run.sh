#!/bin/bash
# Issue 35's ESS search step: first-order joint search step (intra cell and both ESS gates), H = 64,
# bench/search_step.py --method ess, one thread pinned to core 0, the other core idle. Three checkouts,
# processes alternating: d0be6d6 (the code the issue measured, its own C++ build, this benchmark file
# copied in), 02d55f8 (before this change) and the working tree. Worktrees outside the repository:
#   git worktree add /work/wt-d0be6d6 d0be6d6; (cd /work/wt-d0be6d6 && python setup.py -q build_ext --inplace)
#   cp bench/search_step.py bench/harness.py /work/wt-d0be6d6/bench/
#   git worktree add /work/wt-02d55f8 02d55f8; cp nas/fast/_fused_kernels*.so /work/wt-02d55f8/nas/fast/
# Run from the repository root with the venv active.
PEAKS="import sys; sys.path.insert(0, 'bench'); import torch; torch.set_num_threads(1); from harness import gemm_peaks; print('GEMM peaks (GFLOP/s, 1 thread):', gemm_peaks())"
PARSE="import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d['order1_fast_step_s'], d['order1_fast_tokens_per_s'])"
ROOT=$(pwd)
taskset -c 0 python -c "$PEAKS"
echo "start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
for round in 1 2 3; do
  for d in /work/wt-d0be6d6 /work/wt-02d55f8 "$ROOT"; do
    echo -n "$(basename $d) "; (cd $d && taskset -c 0 python bench/search_step.py --threads 1 --orders 1 --repeats 5 --no-reference --method ess --nhid 64 | python3 -c "$PARSE")
  done
done
taskset -c 0 python -c "$PEAKS"
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
