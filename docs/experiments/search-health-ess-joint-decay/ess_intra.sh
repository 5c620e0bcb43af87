#!/bin/bash
# 2026-11-26 (issue 30): ESS intra-only beside ess_joint.sh, the same settings (PTB, H = 64, 8 nodes,
# batch 64, lr 20, first order, seed 2, 30 rounds, the shared weights' lr decayed 0.75 a round from
# round 15), so that the ESS claims are also answered at equal budget with the decay, one seed, one host.
# One thread, pinned to core 0. Resumable: rerun (it resumes when a checkpoint exists).
cd /work/main
R=/work/runs/study30e/ess_intra_s2
if [ -e $R/config.json ]; then
  taskset -c 0 .venv/bin/python bin/search-lm --resume $R --rounds 30 --lr-decay 0.75 --lr-decay-start 15 --threads 1
else
  taskset -c 0 .venv/bin/python bin/search-lm --data ../shared/data/ptb --emsize 64 --nhid 64 --batch-size 64 --bptt 35 --eval-batch-size 64 --nodes 8 --seed 2 --threads 1 --method ess --search-space intra --rounds 30 --lr-decay 0.75 --lr-decay-start 15 --run-dir $R
fi
