#!/bin/bash
# 2026-11-24 (new session after an environment restart killed extend2.sh's ESS joint in round 21):
# ESS joint on from round 20 to 30 (core 1) and ESS intra-only from 10 to 30 (core 0), for the
# equal-budget comparison at 30 rounds. Resumable: rerun this script.
cd /work/main
S=/work/runs/study30b
taskset -c 1 .venv/bin/python bin/search-lm --resume $S/ess_joint --rounds 30 --threads 1 >> $S/ess_joint.out 2>&1 &
taskset -c 0 .venv/bin/python bin/search-lm --resume $S/ess_intra --rounds 30 --threads 1 >> $S/ess_intra.out 2>&1 &
wait
