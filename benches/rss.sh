#!/usr/bin/env bash
# Memory under sustained load (issue 15, item 6): one node produced to at full rate for
# DURATION_S seconds (1000 x 1 KB per request, 8 connections, acks=all), its RSS sampled every
# second, then a catch-up read of what the partitions still hold. Prints the peak and median RSS
# of each phase next to the node's memory budget (`[storage] memory_budget_bytes`, 1 GiB by
# default). The topic keeps RETENTION_BYTES per partition (retention by size), so the disk use
# stays bounded however fast the machine writes.
#
#   benches/rss.sh                      # 10 minutes
#   DURATION_S=60 benches/rss.sh        # a 1-minute smoke run
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
DURATION_S=${DURATION_S:-600}
RETENTION_BYTES=${RETENTION_BYTES:-1073741824}
PARTITIONS=${PARTITIONS:-4}
CHUNK=${CHUNK:-2000000}
PORT=${PORT:-19740}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir rss

# Retention checked every 10 s (default 5 min), so at full rate the disk use stays near
# PARTITIONS x RETENTION_BYTES instead of growing for 5 minutes at a time.
printf 'retention_check_interval_ms = 10000\n' >"$DIR/herald.toml"
"$HERALD" serve --config "$DIR/herald.toml" --data-dir "$DIR/data" --http-addr "127.0.0.1:$PORT" \
    --raft-addr "127.0.0.1:$((PORT + 1))" >>"$DIR/node.log" 2>&1 &
NODE=$!
PIDS+=("$NODE")
wait_for_ports "$PORT"
curl -sf -XPOST "http://127.0.0.1:$PORT/v1/topics" -H 'content-type: application/json' \
    -d "{\"name\":\"rss\",\"partitions\":$PARTITIONS,\"config\":{\"retention_bytes\":$RETENTION_BYTES}}" >/dev/null

# sample PHASE: appends "PHASE rss_kib" every second until killed.
sample() {
    while kill -0 "$NODE" 2>/dev/null; do
        echo "$1 $(awk '/^VmRSS/ {print $2}' "/proc/$NODE/status")" >>"$DIR/rss"
        sleep 1
    done
}

sample produce &
SAMPLER=$!
PIDS+=("$SAMPLER")
deadline=$(( $(now_ms) + DURATION_S * 1000 ))
produced=0
while [ "$(now_ms)" -lt "$deadline" ]; do
    "$HERALD" bench produce --server "http://127.0.0.1:$PORT" --topic rss --partitions "$PARTITIONS" \
        --message-size 1000 --batch-size 1000 --connections 8 --messages "$CHUNK" --json >"$DIR/chunk.json"
    produced=$((produced + CHUNK))
    echo "$(( ($(now_ms) - deadline) / 1000 + DURATION_S )) s: $produced messages, $(json 'round(d["messages_per_sec"])' <"$DIR/chunk.json") msgs/s," \
        "RSS $(( $(awk '/^VmRSS/ {print $2}' "/proc/$NODE/status") / 1024 )) MiB" >&2
done
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true

sample catch-up &
SAMPLER=$!
PIDS+=("$SAMPLER")
"$HERALD" bench consume --server "http://127.0.0.1:$PORT" --topic rss --messages 1000000000 --json >"$DIR/read.json" || true
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true

for phase in produce catch-up; do
    peak=$(awk -v p="$phase" '$1 == p {print $2}' "$DIR/rss" | sort -g | tail -1)
    mid=$(awk -v p="$phase" '$1 == p {print $2}' "$DIR/rss" | median)
    echo "$phase: RSS peak $((peak / 1024)) MiB, median $((${mid%.*} / 1024)) MiB ($(awk -v p="$phase" '$1 == p' "$DIR/rss" | wc -l) samples)"
done
echo "produced $produced messages of 1 KB in $DURATION_S s; read back: $(json 'd.get("messages", 0)' <"$DIR/read.json" 2>/dev/null || echo '?') messages"
echo "memory budget: 1 GiB (storage.memory_budget_bytes default); VmHWM $(awk '/^VmHWM/ {print $2 / 1024 " MiB"}' "/proc/$NODE/status")"
