#!/usr/bin/env bash
# The cost of exporting spans (issue 16): produce throughput of one node with OTLP export off
# and on (`--otlp-endpoint` at a `herald bench sink`, which takes the spans and does nothing, so
# only the node's side is measured; every trace sampled), alternating ROUNDS times, medians and
# the ratio on/off. Two workloads: one 100 B message per POST on 64 connections (a request span
# and a proposal span per few requests: the worst case), and 1000 x 100 B per request.
#
#   benches/tracing.sh
#   ROUNDS=5 SINGLE=100000 benches/tracing.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
ROUNDS=${ROUNDS:-3}
SINGLE=${SINGLE:-60000}
BATCHED=${BATCHED:-1000000}
PORT=${PORT:-19720}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir tracing

COLLECTOR=$((PORT + 5))
"$HERALD" bench sink --listen "127.0.0.1:$COLLECTOR" >>"$DIR/collector.log" 2>&1 &
PIDS+=($!)
wait_for_ports "$COLLECTOR"

# run MODE ROUND: one node (OTLP export MODE=on|off), both workloads; appends "MODE single|batched N" lines.
run() {
    local mode=$1 round=$2 port=$((PORT + $2 % 2)) flags=() pid single batched
    [ "$mode" = on ] && flags=(--otlp-endpoint "http://127.0.0.1:$COLLECTOR")
    "$HERALD" serve --data-dir "$DIR/$mode-$round" --http-addr "127.0.0.1:$port" \
        --raft-addr "127.0.0.1:$((port + 10))" "${flags[@]}" >>"$DIR/node-$mode-$round.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_for_ports "$port"
    single=$("$HERALD" bench produce --server "http://127.0.0.1:$port" --topic single --partitions 4 \
        --message-size 100 --raw --connections 64 --messages "$SINGLE" --json | json 'd["messages_per_sec"]')
    batched=$("$HERALD" bench produce --server "http://127.0.0.1:$port" --topic batched --partitions 4 \
        --message-size 100 --batch-size 1000 --connections 8 --messages "$BATCHED" --json | json 'd["messages_per_sec"]')
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "${DIR:?}/$mode-$round"
    echo "$mode single $single" >>"$DIR/results"
    echo "$mode batched $batched" >>"$DIR/results"
    echo "round $round, export $mode: single $single msgs/s, batched $batched msgs/s" >&2
}

for round in $(seq 1 "$ROUNDS"); do
    # Alternate which goes first, so a drift of the machine does not favour one.
    if [ $((round % 2)) = 1 ]; then run off "$round"; run on "$round"; else run on "$round"; run off "$round"; fi
done

for workload in single batched; do
    off=$(awk -v w="$workload" '$1 == "off" && $2 == w {print $3}' "$DIR/results" | median)
    on=$(awk -v w="$workload" '$1 == "on" && $2 == w {print $3}' "$DIR/results" | median)
    echo "$workload: export off $off msgs/s, on $on msgs/s, on/off $(python3 -c "print(round($on / $off, 3))") (medians of $ROUNDS)"
done
