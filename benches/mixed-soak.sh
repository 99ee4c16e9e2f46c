#!/usr/bin/env bash
# Memory under a mixed load (issue 29, item 8): one node produced to at a paced RATE messages/s
# of MESSAGE_SIZE B (acks=all, batches of BATCH) for DURATION_S seconds while every kind of
# reader runs against it: a consumer-group member polling and committing (`herald bench group`,
# restarted whenever it has caught up), a queue puller acking (`herald pull --follow`), a
# server-sent event reader (curl) and a WebSocket subscriber (`herald consume --follow`). The
# node's RSS is sampled every SAMPLE_S seconds; prints each sample, then the RSS after warm-up
# (the first WARMUP_S seconds) against the last, next to the node's memory budget. Each sample
# also says where the memory is (the node's heap and RocksDB gauges, in MiB). A flat RSS
# after warm-up is the goal; a rising one is what to profile.
#
#   benches/mixed-soak.sh                                  # 30 minutes at 60,000 msg/s
#   DURATION_S=180 SAMPLE_S=20 WARMUP_S=60 benches/mixed-soak.sh   # a 3-minute run
#   READERS=0 benches/mixed-soak.sh                        # the same load without readers
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
DURATION_S=${DURATION_S:-1800}
SAMPLE_S=${SAMPLE_S:-60}
WARMUP_S=${WARMUP_S:-300}
RATE=${RATE:-60000}
BATCH=${BATCH:-100}
MESSAGE_SIZE=${MESSAGE_SIZE:-100}
PARTITIONS=${PARTITIONS:-4}
RETENTION_BYTES=${RETENTION_BYTES:-268435456}
READERS=${READERS:-1}
PORT=${PORT:-19760}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir mixed-soak

URL="http://127.0.0.1:$PORT"
printf 'retention_check_interval_ms = 10000\n' >"$DIR/herald.toml"
"$HERALD" serve --config "$DIR/herald.toml" --data-dir "$DIR/data" --http-addr "127.0.0.1:$PORT" \
    --raft-addr "127.0.0.1:$((PORT + 1))" >>"$DIR/node.log" 2>&1 &
NODE=$!
PIDS+=("$NODE")
wait_for_ports "$PORT"
curl -sf -XPOST "$URL/v1/topics" -H 'content-type: application/json' \
    -d "{\"name\":\"soak\",\"partitions\":$PARTITIONS,\"config\":{\"retention_bytes\":$RETENTION_BYTES}}" >/dev/null
curl -sf -XPUT "$URL/v1/subscriptions/soak-q" -H 'content-type: application/json' \
    -d '{"topic":"soak","start":"latest"}' >/dev/null

rss_mib() { echo $(( $(awk '/^VmRSS/ {print $2}' "/proc/$NODE/status") / 1024 )); }
# Where the memory is, from the node's own gauges (MiB): the allocator's heap in use and free
# in its arenas, the block cache, the memtables, the SST table readers and the raft log's cache
# of recent entries.
memory_parts() {
    curl -sf -m 5 "$URL/metrics" | awk '
        $1 == "herald_process_heap_in_use_bytes" {h=$2}
        $1 == "herald_process_heap_free_bytes" {f=$2}
        $1 == "herald_storage_block_cache_bytes" {c=$2}
        $1 == "herald_storage_memtable_bytes" {m=$2}
        $1 == "herald_storage_table_readers_bytes" {t=$2}
        $1 == "herald_raft_recent_entries_bytes" {r=$2}
        END {printf "heap in use %d, free in arenas %d; block cache %d, memtables %d, table readers %d, recent raft entries %d", h/1048576, f/1048576, c/1048576, m/1048576, t/1048576, r/1048576}'
}
# The node runs with the default budget (`storage.memory_budget_bytes`, 1 GiB).
budget_mib=1024
echo "== mixed soak: $RATE msg/s of $MESSAGE_SIZE B for ${DURATION_S} s; readers $READERS (group member, queue puller, SSE, WebSocket); RSS every ${SAMPLE_S} s (start $(rss_mib) MiB)"

# The load: requests of BATCH messages at RATE/BATCH requests a second.
"$HERALD" bench produce --server "$URL" --topic soak --partitions "$PARTITIONS" --message-size "$MESSAGE_SIZE" \
    --batch-size "$BATCH" --connections 8 --rate "$(( RATE / BATCH ))" --messages "$(( RATE * DURATION_S ))" \
    --json >"$DIR/produce.json" 2>>"$DIR/clients.log" &
PRODUCER=$!
PIDS+=("$PRODUCER")
if [ "$READERS" = 1 ]; then
(while kill -0 "$NODE" 2>/dev/null; do
    "$HERALD" bench group --server "$URL" --topic soak --members 1 --messages 1000000000 --json >/dev/null 2>>"$DIR/clients.log" || sleep 1
done) &
PIDS+=($!)
"$HERALD" pull --server "$URL" soak-q --follow --max-messages 1000 --max-wait-ms 1000 >/dev/null 2>>"$DIR/clients.log" &
PIDS+=($!)
curl -sN "$URL/v1/topics/soak/events?from=latest" >/dev/null 2>>"$DIR/clients.log" &
PIDS+=($!)
"$HERALD" consume --server "$URL" soak --follow --from latest --format json >/dev/null 2>>"$DIR/clients.log" &
PIDS+=($!)
fi

start=$(now_ms)
: >"$DIR/rss"
while kill -0 "$PRODUCER" 2>/dev/null; do
    sleep "$SAMPLE_S"
    elapsed=$(( ($(now_ms) - start) / 1000 ))
    rss=$(rss_mib)
    echo "$elapsed $rss" >>"$DIR/rss"
    echo "  ${elapsed} s: RSS ${rss} MiB ($(memory_parts || echo 'metrics n/a'))"
    [ "$elapsed" -lt "$DURATION_S" ] || break
done
wait "$PRODUCER" 2>/dev/null || true
if [ -s "$DIR/produce.json" ]; then
    json '"produced %d messages at %.0f msg/s, produce latency p50 %.1f ms p99 %.1f ms, errors %d" % (d["messages"], d["messages_per_sec"], d["latency_ms"]["p50"], d["latency_ms"]["p99"], d["errors"])' <"$DIR/produce.json" || cat "$DIR/produce.json"
fi
after_warmup=$(awk -v w="$WARMUP_S" '$1 >= w {print $2; exit}' "$DIR/rss")
last=$(tail -1 "$DIR/rss" | awk '{print $2}')
peak=$(awk 'BEGIN {m=0} $2 > m {m=$2} END {print m}' "$DIR/rss")
# What the readers report (queue backlog, group lag) says whether they kept up.
echo "queue subscription: $(curl -sf "$URL/v1/subscriptions/soak-q" | json '"backlog %s, in flight %s" % (d["backlog"], d["in_flight"])' 2>/dev/null || echo n/a)"
# Whether the smaller cache of recent raft entries still serves apply from memory.
echo "raft log reads: $(curl -sf "$URL/metrics" | awk '$1 ~ /^herald_raft_log_reads_total/ {printf "%s %s  ", $1, $2}')"
if [ -s "$DIR/clients.log" ]; then echo "client errors (last lines):"; tail -5 "$DIR/clients.log"; fi
echo "RSS after warm-up (${WARMUP_S} s) ${after_warmup:-n/a} MiB, last ${last:-n/a} MiB, peak ${peak} MiB; budget ${budget_mib} MiB"
