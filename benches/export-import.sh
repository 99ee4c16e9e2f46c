#!/usr/bin/env bash
# `herald topics export` and `herald topics import` (docs/export-import.md) of MESSAGES messages
# of SIZE bytes on one node: messages per second both ways, the median of RUNS runs.
#
# The source topic (PARTITIONS partitions) is filled once with `herald bench produce`
# (BATCH_SIZE messages a request on CONNECTIONS connections: the batches the export carries and
# the import writes one by one are that size, or larger where the node merged requests); each run
# exports it to a file and imports that file into a new topic of the same node, timing each
# command from its start to its exit (what an operator waits for: the import includes its
# check of the whole file before it writes). Each run's import is checked to have written every
# message (the new topic's high watermarks add up to MESSAGES).
#
#   HERALD=/var/tmp/herald-target-export-o2/debug/herald benches/export-import.sh
#   RUNS=5 MESSAGES=200000 PARTITIONS=1 benches/export-import.sh
#   BATCH_SIZE=100 CONNECTIONS=1 benches/export-import.sh   # 10,000 batches of 100 messages
#
# Measure an optimised binary: a debug build's speeds mean nothing.
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
RUNS=${RUNS:-3}
MESSAGES=${MESSAGES:-1000000}
SIZE=${SIZE:-100}
PARTITIONS=${PARTITIONS:-4}
BATCH_SIZE=${BATCH_SIZE:-1000}
CONNECTIONS=${CONNECTIONS:-8}
PORT=${PORT:-19680}
RAFT_PORT=${RAFT_PORT:-19681}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir export-import
SERVER="http://127.0.0.1:$PORT"

"$HERALD" serve --data-dir "$DIR/data" --http-addr "127.0.0.1:$PORT" \
    --raft-addr "127.0.0.1:$RAFT_PORT" >"$DIR/node.log" 2>&1 &
PIDS+=($!)
wait_for_ports "$PORT"

"$HERALD" bench produce --server "$SERVER" --topic source --partitions "$PARTITIONS" \
    --messages "$MESSAGES" --message-size "$SIZE" --batch-size "$BATCH_SIZE" \
    --connections "$CONNECTIONS" --json \
    | json "f\"filled: {d['messages']} messages of $SIZE B in $PARTITIONS partition(s), {d['messages_per_sec']:.0f} messages/s\""

high_watermarks() {
    curl -sf "$SERVER/v1/topics/$1" | json "sum(p['high_watermark'] for p in d['partitions'])"
}
# batches FILE: how many batch frames an export file holds, walked as docs/export-import.md lays
# them out (header, then frames of tag 1, partition, base offset, length, batch).
batches() {
    python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
at = 14 + struct.unpack(">I", data[10:14])[0] + 4
count = 0
while data[at] == 1:
    at += 17 + struct.unpack(">I", data[at + 13:at + 17])[0]
    count += 1
print(count)
PY
}
# timed COMMAND...: runs it, prints its wall time in seconds.
timed() {
    local started
    started=$(now_ms)
    "$@" >/dev/null
    echo "scale=3; ($(now_ms) - $started) / 1000" | bc
}

EXPORTS=() IMPORTS=()
for run in $(seq 1 "$RUNS"); do
    file="$DIR/source-$run.hlx"
    export_s=$(timed "$HERALD" topics export source -o "$file" --quiet --server "$SERVER")
    import_s=$(timed "$HERALD" topics import -i "$file" --topic "copy-$run" --quiet --server "$SERVER")
    written=$(high_watermarks "copy-$run")
    [ "$written" -eq "$MESSAGES" ] || { echo "run $run: the import wrote $written of $MESSAGES" >&2; exit 1; }
    export_rate=$(echo "$MESSAGES / $export_s" | bc)
    import_rate=$(echo "$MESSAGES / $import_s" | bc)
    if [ "$run" = 1 ]; then
        echo "the export: $(( $(stat -c %s "$file") / 1000000 )) MB, $(batches "$file") batches"
    fi
    echo "run $run: export ${export_s}s ($export_rate messages/s), import ${import_s}s ($import_rate messages/s)"
    EXPORTS+=("$export_rate") IMPORTS+=("$import_rate")
    rm -f "$file"
done
echo "export: median $(echo "${EXPORTS[@]}" | median) messages/s of $RUNS runs (${EXPORTS[*]})"
echo "import: median $(echo "${IMPORTS[@]}" | median) messages/s of $RUNS runs (${IMPORTS[*]})"
