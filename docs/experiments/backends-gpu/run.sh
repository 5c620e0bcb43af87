#!/usr/bin/env bash
# One call of the device tool: the compiled cells of --backend cuda-graphs against the definition (check.py), then
# the GPU tests of tests/test_fused_search_cell.py. Output lands in $OUT/backends-gpu.log.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
L=$OUT/backends-gpu.log
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } >> $L 2>&1
timeout 170 python3 docs/experiments/backends-gpu/check.py search >> $L 2>&1; echo "search rc $?" >> $L
timeout 200 python3 docs/experiments/backends-gpu/check.py frozen >> $L 2>&1; echo "frozen rc $?" >> $L
tail -c 3000 $L
