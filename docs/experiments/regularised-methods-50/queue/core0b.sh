#!/bin/bash
# The queue's order from 2026-11-28 21:25: retraining before CoNLL-2000, so that a whole table lands first.
CORE=0; . /work/runs/q/lib.sh
while kill -0 28927 2>/dev/null; do sleep 20; done  # the running WNUT-17 transfer of core0.sh
T=docs/experiments/retrain-random-cells
C=lstm,darts_v2,$T/random_1267_1.json,$T/random_1267_2.json,/work/runs/cells/sdarts_rs_s1.json
transfer wnut17 $C
retrain random_1267_1 --cell $T/random_1267_1.json
retrain random_1267_3 --cell $T/random_1267_3.json
retrain random_1267_5 --cell $T/random_1267_5.json
retrain lstm --cell lstm --match-cell darts_v2
retrain sdarts_rs_s1 --cell /work/runs/cells/sdarts_rs_s1.json
transfer conll2000 $C
: search sdarts-rs-s2 /work/study-code-2 --seed 2 --method sdarts-rs --epochs 50 --early-stop converged # stopped 2026-11-29 02:24 after epoch 3: training diverged (train ppl 3.3e12); not to be resumed
