#!/bin/bash
CORE=0; . /work/runs/q/lib.sh
search sdarts-rs-s1 /work/study-code
search /work/scratch-i69m/gdas-lr5-s1 /work/scratch-i69m/frozen
search sdarts-rs-s2 /work/study-code-2 --seed 2 --method sdarts-rs --epochs 50 --early-stop converged
. /work/runs/q/lib.sh  # again: steps added since the start
T=docs/experiments/retrain-random-cells
transfer wnut17 lstm,darts_v2,$T/random_1267_1.json,$T/random_1267_2.json
transfer conll2000 lstm,darts_v2,$T/random_1267_1.json,$T/random_1267_2.json
retrain random_1267_1 --cell $T/random_1267_1.json
retrain random_1267_3 --cell $T/random_1267_3.json
retrain random_1267_5 --cell $T/random_1267_5.json
retrain lstm --cell lstm --match-cell darts_v2
