#!/bin/bash
# 2026-11-24 (issue 30): DARTS, finished at 40 epochs with its genotype unchanged for 5 epochs but its
# validation perplexity moving 1.8% an epoch at the constant lr 20, goes on 10 more epochs with the
# weights' lr decayed 0.75 an epoch (the schedule given random search and ENAS here; DARTS's own search
# keeps it constant), to see whether weight noise is all that keeps it from the rule. Core 0, after
# random search ends. Resumable: rerun.
cd /work/main
S=/work/runs/study30c
while pgrep -f "resume $S/random" >/dev/null; do sleep 20; done
taskset -c 0 .venv/bin/python bin/search-lm --resume $S/darts_decayed --epochs 50 --lr-decay 0.75 --lr-decay-start 41 --threads 1 >> $S/darts_decayed.out 2>&1
