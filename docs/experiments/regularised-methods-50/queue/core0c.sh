#!/bin/bash
# From 2026-11-29 02:25: SDARTS-RS seed 2 diverged (stopped after epoch 3, reported); seed 3 runs beside it, reported too.
CORE=0; . /work/runs/q/lib.sh
search sdarts-rs-s3 /work/study-code-2 --seed 3 --method sdarts-rs --epochs 50 --early-stop converged
