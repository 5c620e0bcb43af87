#!/bin/bash
# Issue 66's targets on the idle AMD host: one pinned thread on core 0, the searches paused (SIGSTOP).
cd "$(dirname "$0")/../../.."; export PYTHONPATH=$PWD; PY=${PY:-python}  # ORIGINAL: the port of DARTS rnn/ (outside the repository)
echo "start $(date -u +%FT%TZ) $(cat /proc/loadavg) $(git log --oneline -1)"
taskset -c 0 $PY bench/search_step.py --threads 1 --orders 1 2 --repeats 5 --original "${ORIGINAL:?the folder of the ported original DARTS rnn/}"
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/birnn.py --threads 1 --repeats 5 --runs frozen,lstm
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/birnn.py --threads 1 --repeats 3 --cell ess_joint_search_h64 --runs frozen_autograd,lstm  # as run: "frozen,lstm", refused (ESS has no fused run); rerun after
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/tagger_epoch.py --threads 1 --sentences 1000 --match-params --repeats 3 --predict-repeats 3
echo "end $(date -u +%FT%TZ) $(cat /proc/loadavg)"
