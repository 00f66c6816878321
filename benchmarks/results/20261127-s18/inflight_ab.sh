#!/bin/bash
# usage: inflight_ab.sh PREFIX N -- N pairs of the smallbatch case, ORDEREDSTREAM_PARTITIONS_IN_FLIGHT=1 then 2, each with its Spark event log
cd /work/main
for i in $(seq 1 $2); do
  for v in 1 2; do
    mkdir -p /tmp/s18/ev-$1-$i-$v
    BENCH_EVENT_LOG=/tmp/s18/ev-$1-$i-$v ORDEREDSTREAM_PARTITIONS_IN_FLIGHT=$v flock /tmp/orderedstream-bench.lock scripts/bench --size default --only smallbatch --out /tmp/s18/$1-$i-$v > /tmp/s18/$1-$i-$v.log 2>&1
  done
done
