#!/bin/bash
# The queue's order from 2026-11-28 21:25; darts_search_h64 retrained too: retraining before CoNLL-2000, so that a whole table lands first.
CORE=1; . /work/runs/q/lib.sh
while kill -0 29602 2>/dev/null; do sleep 20; done  # the running WNUT-17 transfer of core1.sh
T=docs/experiments/retrain-random-cells
C=darts_search_h64,$T/random_1267_4.json,$T/random_1267_3.json,$T/random_1267_5.json,/work/runs/cells/beta_darts_s1.json
transfer wnut17 $C
retrain random_1267_2 --cell $T/random_1267_2.json
retrain random_1267_4 --cell $T/random_1267_4.json
retrain darts_v2 --cell darts_v2
retrain beta_darts_s1 --cell /work/runs/cells/beta_darts_s1.json
retrain darts_search_h64 --cell darts_search_h64
transfer conll2000 $C
search beta-darts-s2 /work/study-code-2 --seed 2 --method beta-darts --epochs 50 --early-stop converged
