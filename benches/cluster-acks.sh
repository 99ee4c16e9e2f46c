#!/usr/bin/env bash
# Produce latency by acks level on a 3-node cluster on this machine: one partition with
# replication factor 3, the load sent to its leader at a fixed, moderate rate (so latency is
# not queueing), acks=all and acks=leader alternating for RUNS rounds. Prints p50/p99 of each
# round and the medians; acks=leader skips the followers' round trip and fsync.
#
#   benches/cluster-acks.sh
#   RUNS=5 RATE=100 MESSAGES=20000 benches/cluster-acks.sh
set -euo pipefail

RUNS=${RUNS:-3}
RATE=${RATE:-200}            # requests per second
BATCH=${BATCH:-10}           # messages per request
MESSAGES=${MESSAGES:-20000}  # messages per run (RATE * BATCH * 10 s)
BASE_HTTP=${BASE_HTTP:-19480}
BASE_RAFT=${BASE_RAFT:-19470}
EXTRA_ARGS='' KEEP_LOGS=''      # (not knobs of this bench)
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" acks

start_cluster
create_topic 1 acks 1 3
wait_topics 60 1 "len(p['in_sync']) == 3" acks
sleep 5 # leadership settles on the preferred replica
leader=$(curl -sf "$(url 1 /v1/topics/acks)" | json "d['partitions'][0]['leader']")
echo "partition leader: node $leader; $RATE requests/s of $BATCH x 100 B, $MESSAGES messages per run"

declare -A P50 P99
for run in $(seq 1 "$RUNS"); do
    for acks in all leader; do
        out=$("$HERALD" bench produce --server "$(url "$leader" "")" --topic acks --acks "$acks" \
            --batch-size "$BATCH" --connections 4 --messages "$MESSAGES" --rate "$RATE" --json)
        p50=$(echo "$out" | json "d['latency_ms']['p50']")
        p99=$(echo "$out" | json "d['latency_ms']['p99']")
        P50[$acks]+="$p50 "
        P99[$acks]+="$p99 "
        echo "run $run acks=$acks: p50 ${p50} ms, p99 ${p99} ms"
    done
done
for acks in all leader; do
    echo "acks=$acks: median p50 $(echo "${P50[$acks]}" | median) ms, median p99 $(echo "${P99[$acks]}" | median) ms"
done
echo "acks=leader answers by $(curl -sf "$(url "$leader" /metrics)" | grep '^herald_leader_acks_total' | tr '\n' ' ')"
