#!/usr/bin/env bash
# Failover time: SIGKILL a partition leader of a 3-node cluster on this machine, then measure
# the time until the first successful acks=all produce to that partition through a survivor.
# Repeats RUNS times (restarting the killed node and waiting for it to be in sync in between)
# and prints every sample and the median, in milliseconds.
#
#   benches/cluster-failover.sh            # uses $CARGO_TARGET_DIR/release/herald
#   HERALD=path/to/herald RUNS=5 benches/cluster-failover.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RUNS=${RUNS:-5}
BASE_HTTP=${BASE_HTTP:-19180}
BASE_RAFT=${BASE_RAFT:-19170}
EXTRA_ARGS=${EXTRA_ARGS:-}
DIR=$(mktemp -d /tmp/herald-failover.XXXXXX)
declare -A PIDS

cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

CLUSTER="1=127.0.0.1:$((BASE_RAFT + 1)),2=127.0.0.1:$((BASE_RAFT + 2)),3=127.0.0.1:$((BASE_RAFT + 3))"
start_node() {
    local id=$1
    # shellcheck disable=SC2086
    "$HERALD" serve --node-id "$id" --data-dir "$DIR/d$id" \
        --http-addr "127.0.0.1:$((BASE_HTTP + id))" --raft-addr "127.0.0.1:$((BASE_RAFT + id))" \
        --initial-cluster "$CLUSTER" $EXTRA_ARGS >>"$DIR/log$id" 2>&1 &
    PIDS[$id]=$!
}
url() { echo "http://127.0.0.1:$((BASE_HTTP + $1))$2"; }
now_ms() { date +%s%3N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

wait_ready() {
    local id=$1 deadline=$(( $(now_ms) + 60000 ))
    until curl -sf "$(url "$id" /readyz)" >/dev/null; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "node $id not ready" >&2; tail -20 "$DIR/log$id" >&2; exit 1; }
        sleep 0.1
    done
}

for id in 1 2 3; do start_node "$id"; done
for id in 1 2 3; do wait_ready "$id"; done
deadline=$(( $(now_ms) + 60000 ))
until [ "$(curl -sf "$(url 1 /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])")" = 3 ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "nodes never all up" >&2; exit 1; }
    sleep 0.2
done
curl -sS --fail-with-body -XPOST "$(url 1 /v1/topics)" -H 'content-type: application/json' \
    -d '{"name":"failover","partitions":1,"replication_factor":3}' >/dev/null

samples=()
for run in $(seq 1 "$RUNS"); do
    # Wait until all three replicas are in sync and the leader is known.
    deadline=$(( $(now_ms) + 60000 ))
    while :; do
        state=$(curl -sf "$(url 1 /v1/topics/failover)" || curl -sf "$(url 2 /v1/topics/failover)" || echo '{}')
        leader=$(echo "$state" | json "d['partitions'][0]['leader'] or 0" 2>/dev/null || echo 0)
        in_sync=$(echo "$state" | json "len(d['partitions'][0]['in_sync'])" 2>/dev/null || echo 0)
        [ "$leader" != 0 ] && [ "$in_sync" = 3 ] && break
        [ "$(now_ms)" -lt "$deadline" ] || { echo "replicas never in sync" >&2; exit 1; }
        sleep 0.2
    done
    curl -sf -XPOST "$(url "$leader" /v1/topics/failover/messages)" -H 'content-type: application/json' \
        -d '{"messages":[{"value":"before"}]}' >/dev/null
    survivor=$(( leader % 3 + 1 ))
    kill -9 "${PIDS[$leader]}"
    killed_at=$(now_ms)
    while :; do
        if curl -sf -m 30 -XPOST "$(url "$survivor" '/v1/topics/failover/messages?acks=all')" \
            -H 'content-type: application/json' -d '{"messages":[{"value":"after"}]}' >/dev/null; then
            break
        fi
        sleep 0.01
    done
    took=$(( $(now_ms) - killed_at ))
    samples+=("$took")
    echo "run $run: killed leader node $leader, first acks=all produce through node $survivor after ${took} ms"
    start_node "$leader"
    wait_ready "$leader"
done

sorted=$(printf '%s\n' "${samples[@]}" | sort -n)
median=$(echo "$sorted" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "failover samples (ms): ${samples[*]}"
echo "failover median: ${median} ms over ${RUNS} runs"
