#!/bin/bash
# 2026-11-25 (issue 30): ESS joint (the study's settings: PTB, H = 64, 8 nodes, batch 64, lr 20)
# from scratch to 30 rounds, the shared weights' lr decayed 0.75 a round from round 15 (16 decayed
# rounds, 0.75^16 = 0.010, the schedule of the continued random search, ENAS and I-DARTS runs).
# The 30-round constant-lr run's directory was lost with its machine. Seed 2: on this host seed 1
# diverged in its first rounds (train ppl 1.1e4, 1.6e7, 5.0e10, 1.7e13 in rounds 1-4; ess_joint_seed1_diverged).
# One thread, pinned to core 1.
# Resumable: rerun (it resumes when a checkpoint exists).
cd /work/main
R=/work/runs/study30e/ess_joint_s2
if [ -e $R/config.json ]; then
  taskset -c 1 .venv/bin/python bin/search-lm --resume $R --rounds 30 --lr-decay 0.75 --lr-decay-start 15 --threads 1
else
  taskset -c 1 .venv/bin/python bin/search-lm --data ../shared/data/ptb --emsize 64 --nhid 64 --batch-size 64 --bptt 35 --eval-batch-size 64 --nodes 8 --seed 2 --threads 1 --method ess --search-space joint --rounds 30 --lr-decay 0.75 --lr-decay-start 15 --run-dir $R
fi
