#!/usr/bin/env bash
# Produce latency by acks level on a 3-node cluster on this machine: one partition with
# replication factor 3, the load sent to its leader at a fixed, moderate rate (so latency is
# not queueing), acks=all and acks=leader alternating for RUNS rounds. Prints p50/p99 of each
# round and the medians; acks=leader skips the followers' round trip and fsync.
#
#   benches/cluster-acks.sh
#   RUNS=5 RATE=100 MESSAGES=20000 benches/cluster-acks.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RUNS=${RUNS:-3}
RATE=${RATE:-200}            # requests per second
BATCH=${BATCH:-10}           # messages per request
MESSAGES=${MESSAGES:-20000}  # messages per run (RATE * BATCH * 10 s)
BASE_HTTP=${BASE_HTTP:-19480}
BASE_RAFT=${BASE_RAFT:-19470}
DIR=$(mktemp -d /tmp/herald-acks.XXXXXX)
declare -A PIDS

cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

CLUSTER="1=127.0.0.1:$((BASE_RAFT + 1)),2=127.0.0.1:$((BASE_RAFT + 2)),3=127.0.0.1:$((BASE_RAFT + 3))"
url() { echo "http://127.0.0.1:$((BASE_HTTP + $1))$2"; }
now_ms() { date +%s%3N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

for id in 1 2 3; do
    "$HERALD" serve --node-id "$id" --data-dir "$DIR/d$id" \
        --http-addr "127.0.0.1:$((BASE_HTTP + id))" --raft-addr "127.0.0.1:$((BASE_RAFT + id))" \
        --initial-cluster "$CLUSTER" >>"$DIR/log$id" 2>&1 &
    PIDS[$id]=$!
done
deadline=$(( $(now_ms) + 60000 ))
until [ "$(curl -sf "$(url 1 /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = 3 ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "cluster did not form" >&2; exit 1; }
    sleep 0.2
done
curl -sS --fail-with-body -XPOST "$(url 1 /v1/topics)" -H 'content-type: application/json' \
    -d '{"name":"acks","partitions":1,"replication_factor":3}' >/dev/null
until [ "$(curl -sf "$(url 1 /v1/topics/acks)" | json "len(d['partitions'][0]['in_sync'])" 2>/dev/null)" = 3 ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "replicas never in sync" >&2; exit 1; }
    sleep 0.2
done
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
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for acks in all leader; do
    echo "acks=$acks: median p50 $(echo "${P50[$acks]}" | median) ms, median p99 $(echo "${P99[$acks]}" | median) ms"
done
echo "acks=leader answers by $(curl -sf "$(url "$leader" /metrics)" | grep '^herald_leader_acks_total' | tr '\n' ' ')"
