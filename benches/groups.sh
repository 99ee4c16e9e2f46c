#!/usr/bin/env bash
# Consumer groups on one node (release build), two figures:
#  1. read throughput of a group of MEMBERS members (commit after every poll) on a topic of
#     PARTITIONS partitions, against reading the same partitions directly (`bench consume`, one
#     connection per partition) in the same run, alternating for RUNS rounds; the ratio of the
#     medians;
#  2. rebalance time of a group of 10 members on 30 partitions when one member leaves (median of
#     REBALANCE_RUNS runs, `herald bench rebalance`).
#
#   benches/groups.sh
#   RUNS=5 MESSAGES=2000000 benches/groups.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RUNS=${RUNS:-3}
MESSAGES=${MESSAGES:-1000000}  # messages in the topic, read in full by each reader
PARTITIONS=${PARTITIONS:-6}
MEMBERS=${MEMBERS:-3}
MAX_MESSAGES=${MAX_MESSAGES:-1000}  # per poll / per read
REBALANCE_RUNS=${REBALANCE_RUNS:-5}
PORT=${PORT:-19590}
RAFT_PORT=${RAFT_PORT:-19591}
DIR=$(mktemp -d /var/tmp/herald-groups.XXXXXX)
PID=

cleanup() {
    [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
url() { echo "http://127.0.0.1:$PORT$1"; }

"$HERALD" serve --data-dir "$DIR/data" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$RAFT_PORT" \
    >>"$DIR/node.log" 2>&1 &
PID=$!
deadline=$(( $(now_ms) + 30000 ))
until curl -sf "$(url /readyz)" >/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "node did not start" >&2; tail "$DIR/node.log" >&2; exit 1; }
    sleep 0.1
done

echo "== fill: $MESSAGES messages of 100 B over $PARTITIONS partitions"
"$HERALD" bench produce --server "$(url "")" --topic groups --partitions "$PARTITIONS" \
    --message-size 100 --batch-size 1000 --connections 8 --messages "$MESSAGES" --json \
    | json "f\"{d['messages_per_sec']:.0f} msg/s\""

echo "== read: a group of $MEMBERS members against direct reads, $RUNS rounds"
GROUP=() DIRECT=()
for run in $(seq 1 "$RUNS"); do
    direct=$("$HERALD" bench consume --server "$(url "")" --topic groups --max-messages "$MAX_MESSAGES" \
        --messages "$MESSAGES" --json | json "f\"{d['messages_per_sec']} {d['messages']}\"")
    group=$("$HERALD" bench group --server "$(url "")" --topic groups --members "$MEMBERS" \
        --max-messages "$MAX_MESSAGES" --messages "$MESSAGES" --json \
        | json "f\"{d['messages_per_sec']} {d['messages']} {d['latency_ms']['p50']} {d['errors']}\"")
    read -r direct_rate direct_count <<<"$direct"
    read -r group_rate group_count group_p50 group_errors <<<"$group"
    printf 'run %d: direct %10.0f msg/s (%d messages), group %10.0f msg/s (%d messages, poll p50 %.1f ms, %d errors)\n' \
        "$run" "$direct_rate" "$direct_count" "$group_rate" "$group_count" "$group_p50" "$group_errors"
    DIRECT+=("$direct_rate"); GROUP+=("$group_rate")
done
direct=$(printf '%s\n' "${DIRECT[@]}" | median)
group=$(printf '%s\n' "${GROUP[@]}" | median)
printf 'median: group %.0f msg/s, direct %.0f msg/s, ratio %.2f\n' "$group" "$direct" \
    "$(echo "$group / $direct" | bc -l)"

echo "== rebalance: 10 members on 30 partitions, one leaves, $REBALANCE_RUNS runs"
"$HERALD" bench rebalance --server "$(url "")" --topic rebalance --partitions 30 --members 10 \
    --runs "$REBALANCE_RUNS"
