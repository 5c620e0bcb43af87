#!/bin/bash
# 2026-11-24 ~20:05 UTC, both cores idle: the two searches nearest the convergence rule go on,
# ESS intra-only 30 -> 36 rounds (core 0) and DARTS 30 -> 40 epochs (core 1). Resumable: rerun.
cd /work/main
S=/work/runs/study30b
taskset -c 0 .venv/bin/python bin/search-lm --resume $S/ess_intra --rounds 36 --threads 1 >> $S/ess_intra.out 2>&1 &
taskset -c 1 .venv/bin/python bin/search-lm --resume $S/darts --epochs 40 --threads 1 >> $S/darts.out 2>&1 &
wait
