#!/bin/bash
# The full CoNLL-2000 training set (8,936 sentences), 2 epochs, DARTS_V2 at hidden 64, core 0, one
# thread, the other core idle: the working tree only. Run from the repository root with the venv active.
set -e
echo "== full $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
python bench/pooled_flair.py --data /work/shared/data/conll2000 --epochs 2 --core 0
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
