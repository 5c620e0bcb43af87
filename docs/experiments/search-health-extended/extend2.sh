#!/bin/bash
# Started 2026-11-24 ~04:50 on the idle cores at the session's end: DARTS on to 30 epochs (core 0), ESS joint on to 30 rounds (core 1).
# Resumable: checkpoints at every epoch end; rerun this script to go on.
cd /work/main
S=/work/runs/study30b
taskset -c 0 .venv/bin/python bin/search-lm --resume $S/darts --epochs 30 --threads 1 >> $S/darts.out 2>&1 &
taskset -c 1 .venv/bin/python bin/search-lm --resume $S/ess_joint --rounds 30 --threads 1 >> $S/ess_joint.out 2>&1 &
wait
