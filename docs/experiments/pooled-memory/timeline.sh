# VmRSS every 0.5 s of one full-set bin/train-tagger run (2 epochs), with training.log lines interleaved
# Usage (from the repository root, venv active): DATA=PATH bash timeline.sh EMBEDDINGS CORE OUT
spec=$1; core=$2; out=$3
rm -rf /tmp/tl-$core; mkdir -p /tmp/tl-$core
cd "$(git rev-parse --show-toplevel)"
taskset -c $core env OMP_NUM_THREADS=1 python bin/train-tagger --cell darts_v2 --corpus conll2000 --data "${DATA:-../shared/data/conll2000}" --hidden-size 64 --embeddings $spec --max-epochs 2 --seed 1 --threads 1 --run-dir /tmp/tl-$core/run > /tmp/tl-$core/stdout 2>&1 &
pid=$!
t0=$(date +%s.%N)
: > $out
while kill -0 $pid 2>/dev/null; do
  r=$(grep VmRSS /proc/$pid/status 2>/dev/null | awk '{print $2}')
  l=$(tail -1 /tmp/tl-$core/stdout | cut -c1-100)
  echo "$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-6) $r $l" >> $out
  sleep 0.5
done
