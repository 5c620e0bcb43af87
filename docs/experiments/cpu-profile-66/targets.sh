#!/bin/bash
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
PY=${PY:-python}
echo "start $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/search_step.py --threads 1 --orders 1 2 --no-reference --repeats 3
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/birnn.py --threads 1 --repeats 5 --runs frozen,lstm
echo "mid $(date -u +%FT%TZ) $(cat /proc/loadavg)"
taskset -c 0 $PY bench/tagger_epoch.py --threads 1 --sentences 1000 --match-params --repeats 3 --predict-repeats 3
echo "end $(date -u +%FT%TZ) $(cat /proc/loadavg)"
