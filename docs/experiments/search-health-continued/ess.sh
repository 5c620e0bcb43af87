#!/bin/bash
# 2026-11-24 (issue 30): ESS intra-only, finished at 36 rounds (not converged: its cell still changed and
# its perplexity moved up to 1.1% a round at the constant lr 20), goes on 10 more rounds with the weights'
# lr decayed 0.75 a round, as DARTS does in darts.sh. Core 1, after ENAS ends. Resumable: rerun.
cd /work/main
S=/work/runs/study30c
while pgrep -f "resume $S/enas" >/dev/null; do sleep 20; done
taskset -c 1 .venv/bin/python bin/search-lm --resume $S/ess_intra_decayed --rounds 46 --lr-decay 0.75 --lr-decay-start 37 --threads 1 >> $S/ess_intra_decayed.out 2>&1
