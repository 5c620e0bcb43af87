#!/bin/bash
# 2026-11-24 (issue 30): random search and ENAS go on from their study checkpoints (epochs 24 and 22) with
# the shared weights' lr decayed 0.75 an epoch (ENAS's PTB search decays 0.95 an epoch from epoch 12 to
# epoch 100, 0.95^88 = 0.011 in all; 0.75^16 = 0.010 over the 16 epochs added here). One thread each,
# pinned; each starts when the longer gradient-based search on its core (study30b/extend5.sh) ends.
# Resumable: rerun.
cd /work/main
S=/work/runs/study30c
B=/work/runs/study30b
( while pgrep -f "resume $B/ess_intra" >/dev/null; do sleep 20; done
  taskset -c 0 .venv/bin/python bin/search-lm --resume $S/random --epochs 40 --lr-decay 0.75 --lr-decay-start 25 --threads 1 >> $S/random.out 2>&1 ) &
( while pgrep -f "resume $B/darts" >/dev/null; do sleep 20; done
  taskset -c 1 .venv/bin/python bin/search-lm --resume $S/enas --epochs 38 --lr-decay 0.75 --lr-decay-start 23 --threads 1 >> $S/enas.out 2>&1 ) &
wait
