#!/usr/bin/env bash
# WebSocket figures (release build by default): `herald bench ws`, ROUNDS rounds of
#   latency  HTTP produce (acks=all) at RATE msg/s -> WebSocket delivery, p50/p99/p99.9;
#   publish  WebSocket publish of 1000 x 1 KB per frame against HTTP produce of the same batches;
#   idle     IDLE subscribed sockets: the node's RSS per connection and its CPU while idle;
#   fanout   one partition to FANOUT subscribers: delivered messages/s;
# each round on freshly started nodes, then the medians. Scenarios:
#  1. single: one node;
#  2. cluster: three nodes on loopback, topics replicated 3 times, produced through node 1 and
#     subscribed on node 2 (memory and CPU are node 2's).
#
#   benches/ws.sh
#   ROUNDS=1 IDLE=2000 SCENARIOS=single benches/ws.sh
#
# 10,000 idle sockets need 10,000 file descriptors in the node and as many in the bench client:
# the script raises `ulimit -n` (to NOFILE, default 30000, or the hard limit) and starts the nodes
# with `--ws-max-connections` and `--max-connections` above IDLE.
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RATE=${RATE:-10000}
LATENCY_MESSAGES=${LATENCY_MESSAGES:-50000}
PUBLISH_FRAMES=${PUBLISH_FRAMES:-200}
IDLE=${IDLE:-10000}
IDLE_SECONDS=${IDLE_SECONDS:-10}
FANOUT=${FANOUT:-1000}
FANOUT_MESSAGES=${FANOUT_MESSAGES:-10000}
ROUNDS=${ROUNDS:-3}
NOFILE=${NOFILE:-30000}
SCENARIOS=${SCENARIOS:-"single cluster"}
PORT=${PORT:-19760}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir ws

hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$NOFILE" ]; then NOFILE=$hard; fi
ulimit -n "$NOFILE"
CONNECTIONS=$((IDLE + FANOUT + 1000))
if [ "$CONNECTIONS" -gt "$NOFILE" ]; then
    echo "ulimit -n is $NOFILE: too low for $IDLE idle sockets; lower IDLE" >&2
    exit 1
fi
LIMITS=(--ws-max-connections "$CONNECTIONS" --max-connections "$CONNECTIONS")

# start_single / start_cluster: fresh nodes (a fresh process, so the idle step's RSS is not
# memory the allocator kept from an earlier round); they set SERVER, PID and EXTRA.
start_single() {
    rm -rf "$DIR/single"
    "$HERALD" serve --data-dir "$DIR/single" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$((PORT + 9))" \
        "${LIMITS[@]}" >>"$DIR/single.log" 2>&1 &
    PIDS+=($!)
    wait_for_ports "$PORT"
    SERVER="http://127.0.0.1:$PORT" PID=${PIDS[0]} EXTRA=()
}
start_cluster() {
    local cluster="1=127.0.0.1:$((PORT + 11)),2=127.0.0.1:$((PORT + 12)),3=127.0.0.1:$((PORT + 13))"
    for n in 1 2 3; do
        rm -rf "$DIR/n$n"
        "$HERALD" serve --node-id "$n" --http-addr "127.0.0.1:$((PORT + n))" --raft-addr "127.0.0.1:$((PORT + 10 + n))" \
            --data-dir "$DIR/n$n" --initial-cluster "$cluster" "${LIMITS[@]}" >>"$DIR/n$n.log" 2>&1 &
        PIDS+=($!)
    done
    wait_for_ports $((PORT + 1)) $((PORT + 2)) $((PORT + 3))
    SERVER="http://127.0.0.1:$((PORT + 2))" PID=${PIDS[1]}
    EXTRA=(--replication-factor 3 --produce-server "http://127.0.0.1:$((PORT + 1))")
}

# rounds START: ROUNDS runs of `herald bench ws`, each on nodes started by START, then medians.
rounds() {
    local start=$1
    : >"$DIR/rounds.json"
    for round in $(seq 1 "$ROUNDS"); do
        "$start"
        "$HERALD" bench ws --server "$SERVER" --pid "$PID" \
            --rate "$RATE" --latency-messages "$LATENCY_MESSAGES" --publish-frames "$PUBLISH_FRAMES" \
            --idle "$IDLE" --idle-seconds "$IDLE_SECONDS" --fanout-subscribers "$FANOUT" \
            --fanout-messages "$FANOUT_MESSAGES" --json "${EXTRA[@]}" 2>>"$DIR/bench.log" | tee -a "$DIR/rounds.json" \
            | json '"round %s: latency p50 %.2f p99 %.2f p99.9 %.2f ms (%d received at %.0f msg/s); publish ws %.0f http %.0f msg/s ratio %.2f; idle %d sockets %.1f kB each, cpu %.1f%%; fanout %.0f msg/s (%d missing)" % ('"$round"', d["latency"]["p50_ms"], d["latency"]["p99_ms"], d["latency"]["p999_ms"], d["latency"]["received"], d["latency"]["achieved_rate"], d["publish"]["ws_messages_per_sec"], d["publish"]["http_messages_per_sec"], d["publish"]["ratio_ws_to_http"], d["idle"]["connections"], d["idle"]["kb_per_connection"], d["idle"]["cpu_percent"], d["fanout"]["delivered_per_sec"], d["fanout"]["missing"])'
        stop_nodes
    done
    for figure in 'd["latency"]["p50_ms"]' 'd["latency"]["p99_ms"]' 'd["latency"]["p999_ms"]' 'd["latency"]["achieved_rate"]' \
        'd["publish"]["ws_messages_per_sec"]' 'd["publish"]["http_messages_per_sec"]' 'd["publish"]["ratio_ws_to_http"]' \
        'd["idle"]["rss_before_kb"]' 'd["idle"]["rss_after_kb"]' 'd["idle"]["kb_per_connection"]' 'd["idle"]["cpu_percent"]' \
        'd["fanout"]["delivered_per_sec"]'; do
        printf '  median %-38s %s\n' "$figure" "$(while read -r line; do echo "$line" | json "$figure"; done <"$DIR/rounds.json" | median)"
    done
}

for scenario in $SCENARIOS; do
    case $scenario in
    single)
        echo "== one node: rate $RATE, $IDLE idle sockets, fan-out to $FANOUT, $ROUNDS rounds on fresh nodes"
        rounds start_single
        ;;
    cluster)
        echo "== three nodes (RF 3): produce through node 1, subscribe on node 2, $ROUNDS rounds on fresh nodes"
        rounds start_cluster
        ;;
    *) echo "unknown scenario $scenario (single, cluster)" >&2; exit 1 ;;
    esac
done
