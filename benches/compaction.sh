#!/usr/bin/env bash
# Log compaction on one node (release build), three figures:
#  1. produce throughput to a compacted topic with the cleaner running against the same with
#     no cleaning at all, alternating for RUNS rounds in one run (a fresh node each time), and
#     the ratio of the medians;
#  2. cleaner throughput: MB/s of log examined by one pass over a partition written with no
#     cleaning, restarted with cleaning on (RUNS passes over copies of the same data);
#  3. the data directory's size before and after that pass.
#
#   benches/compaction.sh
#   RUNS=5 MESSAGES=4000000 KEYS=100000 benches/compaction.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RUNS=${RUNS:-3}
MESSAGES=${MESSAGES:-2000000}  # messages per run
KEYS=${KEYS:-10000}            # distinct keys
SIZE=${SIZE:-100}              # value bytes
BUDGET=${BUDGET:-67108864}     # the cleaner's I/O budget while producing (the default)
CLEAN_BUDGET=${CLEAN_BUDGET:-1073741824}  # and for the lone pass (high: what the cleaner can do)
PORT=${PORT:-19580}
RAFT_PORT=${RAFT_PORT:-19581}
DIR=$(mktemp -d /var/tmp/herald-compaction.XXXXXX)
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
metric() { curl -sf "$(url /metrics)" | awk -v name="$1" '$1 == name {print $2}' | tail -1; }

# start DATA_DIR CHECK_INTERVAL_MS [BUDGET]: a node, waited for until ready.
start() {
    "$HERALD" serve --data-dir "$1" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$RAFT_PORT" \
        --retention-check-interval-ms "$2" --cleaner-io-max-bytes-per-sec "${3:-$BUDGET}" >>"$1.log" 2>&1 &
    PID=$!
    local deadline=$(( $(now_ms) + 30000 ))
    until curl -sf "$(url /readyz)" >/dev/null; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "node did not start" >&2; tail "$1.log" >&2; exit 1; }
        sleep 0.1
    done
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }

create_topic() {
    curl -sS --fail-with-body -XPOST "$(url /v1/topics)" -H 'content-type: application/json' \
        -d '{"name":"changelog","partitions":1,"config":{"cleanup_policy":"compact","delete_retention_ms":0}}' >/dev/null
}
produce() {
    "$HERALD" bench produce --server "$(url "")" --topic changelog --keys "$KEYS" \
        --message-size "$SIZE" --batch-size 1000 --connections 8 --messages "$MESSAGES" --json \
        | json "f\"{d['messages_per_sec']} {d['latency_ms']['p50']} {d['latency_ms']['p99']}\""
}

echo "== produce: $MESSAGES messages of $SIZE B over $KEYS keys, 1 partition, acks=all"
WITH=() WITHOUT=() WITH_P99=() WITHOUT_P99=()
for run in $(seq 1 "$RUNS"); do
    for mode in without with; do
        data="$DIR/$mode-$run"
        if [ "$mode" = with ]; then start "$data" 200; else start "$data" 3600000; fi
        create_topic
        read -r rate p50 p99 <<<"$(produce)"
        passes=$(metric herald_compaction_passes_total); passes=${passes:-0}
        stop
        printf 'run %d %-7s cleaner: %10.0f msg/s, p50 %6.1f ms, p99 %6.1f ms (%s passes during the run)\n' \
            "$run" "$mode" "$rate" "$p50" "$p99" "$passes"
        if [ "$mode" = with ]; then WITH+=("$rate"); WITH_P99+=("$p99"); else WITHOUT+=("$rate"); WITHOUT_P99+=("$p99"); fi
        rm -rf "$data" "$data.log"
    done
done
with=$(printf '%s\n' "${WITH[@]}" | median)
without=$(printf '%s\n' "${WITHOUT[@]}" | median)
with_p99=$(printf '%s\n' "${WITH_P99[@]}" | median)
without_p99=$(printf '%s\n' "${WITHOUT_P99[@]}" | median)
printf 'median: with %.0f msg/s (p99 %.1f ms), without %.0f msg/s (p99 %.1f ms), throughput ratio %.2f\n' \
    "$with" "$with_p99" "$without" "$without_p99" "$(echo "$with / $without" | bc -l)"

echo "== cleaner: one pass over the same log, $RUNS times (budget $CLEAN_BUDGET B/s)"
source_dir="$DIR/source"
start "$source_dir" 3600000
create_topic
produce >/dev/null
stop
before=$(du -sb "$source_dir" | cut -f1)
RATES=()
for run in $(seq 1 "$RUNS"); do
    data="$DIR/clean-$run"
    cp -a "$source_dir" "$data"
    start "$data" 200 "$CLEAN_BUDGET"
    deadline=$(( $(now_ms) + 600000 ))
    until grep -q "compaction pass finished" "$data.log"; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "no pass finished" >&2; exit 1; }
        sleep 0.2
    done
    line=$(grep "compaction pass finished" "$data.log" | head -1)
    planned=$(grep "compaction pass planned" "$data.log" | head -1)
    bytes=$(echo "$line" | sed -E 's/.*bytes_read=([0-9]+).*/\1/')
    # Planning reads the dirty section (here: all of it) for the key map, the pass reads the
    # whole log again and rewrites: both count.
    took=$(( $(echo "$line" | sed -E 's/.*took_ms=([0-9]+).*/\1/') + $(echo "$planned" | sed -E 's/.*plan_ms=([0-9]+).*/\1/') ))
    kept=$(echo "$line" | sed -E 's/.*records_kept=([0-9]+).*/\1/')
    stop
    after=$(du -sb "$data" | cut -f1)
    rate=$(echo "$bytes / 1000000 / ($took / 1000)" | bc -l)
    printf 'run %d: %d B examined in %d ms = %.1f MB/s; %d messages kept; data dir %.1f MB -> %.1f MB\n' \
        "$run" "$bytes" "$took" "$rate" "$kept" "$(echo "$before / 1000000" | bc -l)" \
        "$(echo "$after / 1000000" | bc -l)"
    RATES+=("$rate")
    rm -rf "$data" "$data.log"
done
printf 'median cleaner throughput: %.1f MB/s\n' "$(printf '%s\n' "${RATES[@]}" | median)"
