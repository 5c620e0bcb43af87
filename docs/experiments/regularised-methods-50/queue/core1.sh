#!/bin/bash
CORE=1; . /work/runs/q/lib.sh
search beta-darts-s1 /work/study-code
search /work/scratch-i69m/drnas-lr5-s1 /work/scratch-i69m/frozen
search beta-darts-s2 /work/study-code-2 --seed 2 --method beta-darts --epochs 50 --early-stop converged
. /work/runs/q/lib.sh  # again: steps added since the start
T=docs/experiments/retrain-random-cells
transfer wnut17 darts_search_h64,$T/random_1267_4.json,$T/random_1267_3.json,$T/random_1267_5.json
transfer conll2000 darts_search_h64,$T/random_1267_4.json,$T/random_1267_3.json,$T/random_1267_5.json
retrain random_1267_2 --cell $T/random_1267_2.json
retrain random_1267_4 --cell $T/random_1267_4.json
retrain darts_v2 --cell darts_v2
