#!/usr/bin/env bash
# session 32's device call (scratch, not committed)
set -u
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1 || { tail -20 $OUT/install.log; exit 1; }
export KERNELDSL_CACHE=/tmp/kc
PYTHONPATH=. timeout 200 python3 -m benchmarks.host_overhead --runtimes cuda --no-torch --calls 2000 --reps 3 > $OUT/host_cuda.txt 2>&1
tail -62 $OUT/host_cuda.txt | grep -v "^  cuda"
PYTHONPATH=. timeout 60 python3 -m benchmarks.gated_delta --runtimes cuda --chunked-kernels > $OUT/gd_cuda.txt 2>&1; tail -15 $OUT/gd_cuda.txt
timeout 290 bash .ci/cuda_shards none 16 $OUT/shards 280 > $OUT/shards.txt 2>&1; echo "shards rc $?"
tail -5 $OUT/shards.txt
grep -h -E "passed|failed" $OUT/shards/*.log 2>/dev/null | tail -20
