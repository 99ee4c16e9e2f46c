#!/usr/bin/env bash
# Queue subscriptions (release build by default): `herald bench queue`, ROUNDS rounds each of
# pull+ack with PULLERS pullers over MESSAGES pre-produced messages against reading the same
# partitions by offset in the same run; prints the medians.
#  1. one node;
#  2. three nodes on loopback, the topic replicated 3 times, pullers spread over the nodes;
#  3. memory: one node, MEMORY_MESSAGES small messages, a subscription pulled without acking until
#     nothing more is leased; the node's RSS before and after.
#
#   benches/queue.sh
#   HERALD=/var/tmp/herald-target/debug/herald MESSAGES=20000 ROUNDS=3 benches/queue.sh
#   SCENARIOS="memory" MEMORY_MESSAGES=1000000 benches/queue.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
MESSAGES=${MESSAGES:-200000}
MESSAGE_SIZE=${MESSAGE_SIZE:-100}
PULLERS=${PULLERS:-4}
PARTITIONS=${PARTITIONS:-4}
ROUNDS=${ROUNDS:-5}
MEMORY_MESSAGES=${MEMORY_MESSAGES:-1000000}
SCENARIOS=${SCENARIOS:-"single cluster memory"}
PORT=${PORT:-19720}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir queue

# rounds SERVER ARGS...: ROUNDS runs of `herald bench queue`, then the medians.
rounds() {
    local server=$1; shift
    : >"$DIR/rounds.json"
    for round in $(seq 1 "$ROUNDS"); do
        "$HERALD" bench queue --server "$server" --messages "$MESSAGES" --message-size "$MESSAGE_SIZE" \
            --pullers "$PULLERS" --partitions "$PARTITIONS" --json "$@" 2>>"$DIR/bench.log" | tee -a "$DIR/rounds.json" \
            | json '"round %s: pull+ack %.0f msg/s, by offset %.0f msg/s, ratio %.3f, ack p50 %.2f ms p99 %.2f ms, errors %d" % ('"$round"', d["queue"]["messages_per_sec"], d["baseline"]["messages_per_sec"], d["ratio"], d["ack_latency_ms"]["p50"], d["ack_latency_ms"]["p99"], d["queue"]["errors"] + d["baseline"]["errors"])'
    done
    for figure in 'd["queue"]["messages_per_sec"]' 'd["baseline"]["messages_per_sec"]' 'd["ratio"]' \
        'd["ack_latency_ms"]["p50"]' 'd["ack_latency_ms"]["p99"]'; do
        printf '  median %-34s %s\n' "$figure" "$(while read -r line; do echo "$line" | json "$figure"; done <"$DIR/rounds.json" | median)"
    done
}

for scenario in $SCENARIOS; do
    case $scenario in
    single)
        echo "== one node, $PULLERS pullers, $MESSAGES messages of $MESSAGE_SIZE B, $PARTITIONS partitions, $ROUNDS rounds"
        "$HERALD" serve --data-dir "$DIR/single" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$((PORT + 9))" \
            >>"$DIR/single.log" 2>&1 &
        PIDS+=($!)
        wait_for_ports "$PORT"
        rounds "http://127.0.0.1:$PORT"
        stop_nodes
        ;;
    cluster)
        echo "== three nodes (RF 3), $PULLERS pullers spread over them, $MESSAGES messages, $ROUNDS rounds"
        cluster="1=127.0.0.1:$((PORT + 11)),2=127.0.0.1:$((PORT + 12)),3=127.0.0.1:$((PORT + 13))"
        for n in 1 2 3; do
            "$HERALD" serve --node-id "$n" --http-addr "127.0.0.1:$((PORT + n))" --raft-addr "127.0.0.1:$((PORT + 10 + n))" \
                --data-dir "$DIR/n$n" --initial-cluster "$cluster" >>"$DIR/n$n.log" 2>&1 &
            PIDS+=($!)
        done
        wait_for_ports $((PORT + 1)) $((PORT + 2)) $((PORT + 3))
        rounds "http://127.0.0.1:$((PORT + 1))" --replication-factor 3 \
            --nodes "http://127.0.0.1:$((PORT + 2)),http://127.0.0.1:$((PORT + 3))"
        stop_nodes
        ;;
    memory)
        echo "== memory: one node, $MEMORY_MESSAGES messages of 16 B, pulled without acking until nothing more is leased"
        "$HERALD" serve --data-dir "$DIR/memory" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$((PORT + 9))" \
            >>"$DIR/memory.log" 2>&1 &
        PIDS+=($!)
        wait_for_ports "$PORT"
        "$HERALD" bench queue --server "http://127.0.0.1:$PORT" --memory --pid "${PIDS[0]}" \
            --topic bench-queue-memory --messages "$MEMORY_MESSAGES" --message-size 16 --partitions "$PARTITIONS" \
            2>>"$DIR/bench.log"
        stop_nodes
        ;;
    *) echo "unknown scenario $scenario (single, cluster, memory)" >&2; exit 1 ;;
    esac
done
