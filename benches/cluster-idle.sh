#!/usr/bin/env bash
# Idle cost of partitions: a 3-node cluster on this machine with PARTITIONS partitions of
# replication factor 3 (each node holds a replica of every partition and leads a third), no
# traffic. Measures each node's CPU use over SECONDS seconds (from /proc/PID/stat) and its
# resident memory, after the cluster settled.
#
#   benches/cluster-idle.sh                      # 300 partitions, default raft timing
#   EXTRA_ARGS="--heartbeat-interval-ms 500 --election-timeout-min-ms 1500 --election-timeout-max-ms 2000" benches/cluster-idle.sh
set -euo pipefail

PARTITIONS=${PARTITIONS:-300}
SECONDS_MEASURED=${SECONDS_MEASURED:-20}
BASE_HTTP=${BASE_HTTP:-19280}
BASE_RAFT=${BASE_RAFT:-19270}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_LOGS=''                    # (not a knob of this bench)
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" idle

rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

start_cluster 120
topics=$(( (PARTITIONS + 99) / 100 ))
for topic in $(seq 1 "$topics"); do
    count=$(( PARTITIONS - (topic - 1) * 100 )); [ "$count" -gt 100 ] && count=100
    create_topic 1 "idle$topic" "$count" 3
done
# Settle: every partition has a leader and 3 in-sync replicas, leaders handed back.
# shellcheck disable=SC2046
wait_topics 120 1 "len(p['in_sync']) == 3" $(seq -f 'idle%.0f' 1 "$topics")
sleep 12
declare -A before
for id in 1 2 3; do before[$id]=$(proc_ticks "${PIDS[$id]}"); done
sleep "$SECONDS_MEASURED"
total=0
for id in 1 2 3; do
    used=$(( $(proc_ticks "${PIDS[$id]}") - before[$id] ))
    pct=$(awk -v t="$used" -v hz="$HZ" -v s="$SECONDS_MEASURED" 'BEGIN {printf "%.1f", 100 * t / hz / s}')
    total=$(awk -v a="$total" -v b="$pct" 'BEGIN {print a + b}')
    leads=$(curl -sf "$(url "$id" /v1/cluster)" | json "[len(n['leader_of']) for n in d['nodes'] if n['id'] == $id][0]")
    echo "node $id: ${pct}% of one core, RSS $(rss_mib "${PIDS[$id]}") MiB, leads $leads partitions"
done
echo "idle: $PARTITIONS partitions x 3 replicas; mean CPU per node $(awk -v t="$total" 'BEGIN {printf "%.1f", t / 3}')% of one core over ${SECONDS_MEASURED}s (args: ${EXTRA_ARGS:-defaults})"
