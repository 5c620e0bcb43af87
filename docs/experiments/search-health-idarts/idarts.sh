#!/bin/bash
# 2026-11-24 (issue 30): I-DARTS (lr 5, the study's settings otherwise) from scratch to 36 epochs, the
# shared weights' lr decayed 0.75 an epoch from epoch 21 (16 decayed epochs, 0.75^16 = 0.010, as the
# continued runs). The 10-epoch run's checkpoints were lost with the machine; seed 1 should repeat
# its first 10 epochs. One thread, pinned to core 0. Resumable: rerun (it resumes when a checkpoint exists).
cd /work/main
R=runs/idarts
if [ -e $R/config.json ]; then
  taskset -c 0 .venv/bin/python bin/search-lm --resume $R --epochs 36 --lr-decay 0.75 --lr-decay-start 21 --threads 1
else
  taskset -c 0 .venv/bin/python bin/search-lm --data data/ptb --emsize 64 --nhid 64 --batch-size 64 --bptt 35 --eval-batch-size 64 --nodes 8 --seed 1 --threads 1 --method idarts --epochs 36 --lr 5 --order 1 --lr-decay 0.75 --lr-decay-start 21 --run-dir $R
fi
