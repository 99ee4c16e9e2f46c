#!/usr/bin/env bash
# Idle cost of partitions: a 3-node cluster on this machine with PARTITIONS partitions of
# replication factor 3 (each node holds a replica of every partition and leads a third), no
# traffic. Measures each node's CPU use over SECONDS seconds (from /proc/PID/stat) and its
# resident memory, after the cluster settled.
#
#   benches/cluster-idle.sh                      # 300 partitions, default raft timing
#   EXTRA_ARGS="--heartbeat-interval-ms 500 --election-timeout-min-ms 1500 --election-timeout-max-ms 2000" benches/cluster-idle.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
PARTITIONS=${PARTITIONS:-300}
SECONDS_MEASURED=${SECONDS_MEASURED:-20}
BASE_HTTP=${BASE_HTTP:-19280}
BASE_RAFT=${BASE_RAFT:-19270}
EXTRA_ARGS=${EXTRA_ARGS:-}
DIR=$(mktemp -d /tmp/herald-idle.XXXXXX)
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
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

for id in 1 2 3; do
    # shellcheck disable=SC2086
    "$HERALD" serve --node-id "$id" --data-dir "$DIR/d$id" \
        --http-addr "127.0.0.1:$((BASE_HTTP + id))" --raft-addr "127.0.0.1:$((BASE_RAFT + id))" \
        --initial-cluster "$CLUSTER" $EXTRA_ARGS >>"$DIR/log$id" 2>&1 &
    PIDS[$id]=$!
done
deadline=$(( $(now_ms) + 120000 ))
until [ "$(curl -sf "$(url 1 /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = 3 ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "cluster did not form" >&2; tail -20 "$DIR/log1" >&2; exit 1; }
    sleep 0.2
done
topics=$(( (PARTITIONS + 99) / 100 ))
for topic in $(seq 1 "$topics"); do
    count=$(( PARTITIONS - (topic - 1) * 100 )); [ "$count" -gt 100 ] && count=100
    curl -sS --fail-with-body -m 120 -XPOST "$(url 1 /v1/topics)" -H 'content-type: application/json' \
        -d "{\"name\":\"idle$topic\",\"partitions\":$count,\"replication_factor\":3}" >/dev/null
done
# Settle: every partition has a leader and 3 in-sync replicas, leaders handed back.
until [ "$(for topic in $(seq 1 "$topics"); do curl -sf "$(url 1 "/v1/topics/idle$topic")"; echo; done |
    python3 -c "import json,sys; print(sum(len(p['in_sync']) == 3 for l in sys.stdin if l.strip() for p in json.loads(l)['partitions']))")" = "$PARTITIONS" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "partitions did not settle" >&2; exit 1; }
    sleep 1
done
sleep 12
hz=$(getconf CLK_TCK)
declare -A before
for id in 1 2 3; do before[$id]=$(cpu_ticks "${PIDS[$id]}"); done
sleep "$SECONDS_MEASURED"
total=0
for id in 1 2 3; do
    used=$(( $(cpu_ticks "${PIDS[$id]}") - before[$id] ))
    pct=$(awk -v t="$used" -v hz="$hz" -v s="$SECONDS_MEASURED" 'BEGIN {printf "%.1f", 100 * t / hz / s}')
    total=$(awk -v a="$total" -v b="$pct" 'BEGIN {print a + b}')
    leads=$(curl -sf "$(url "$id" /v1/cluster)" | json "[len(n['leader_of']) for n in d['nodes'] if n['id'] == $id][0]")
    echo "node $id: ${pct}% of one core, RSS $(rss_mib "${PIDS[$id]}") MiB, leads $leads partitions"
done
echo "idle: $PARTITIONS partitions x 3 replicas; mean CPU per node $(awk -v t="$total" 'BEGIN {printf "%.1f", t / 3}')% of one core over ${SECONDS_MEASURED}s (args: ${EXTRA_ARGS:-defaults})"
