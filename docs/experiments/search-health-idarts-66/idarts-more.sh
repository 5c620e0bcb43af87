#!/bin/bash
# 2026-11-25 (issue 30): I-DARTS resumed from its 36-epoch checkpoint to 66 epochs, the same
# settings (lr 5, weights' lr decayed 0.75 an epoch from epoch 21, continuing), to see whether
# node 4's trading settles. One thread, pinned to core 1. Resumable: rerun.
cd /work/main
taskset -c 1 .venv/bin/python bin/search-lm --resume /work/runs/study30d/idarts --epochs 66 --lr-decay 0.75 --lr-decay-start 21 --threads 1
