#!/usr/bin/env bash
# Catch-up time: a 3-node cluster on this machine, a topic of PARTITIONS partitions with
# replication factor 3. SIGKILL node 3, produce BYTES of MSG_SIZE-byte messages through node 1
# (acks=all, a quorum of nodes 1 and 2), note the leaders' high watermarks, restart node 3 with
# only its own flags, and measure the time from the restart until
#   - every partition's leader lists node 3 in in_sync (asked of the leader itself), and
#   - GET /v1/topics/{topic} on node 3 reports the leaders' high watermarks, and
#   - node 3 has appended to its raft log at least the bytes node 1 appended while node 3 was
#     down (herald_raft_log_appended_bytes_total): its own replica has the data, not only a
#     leader's report of it (in_sync allows a lag of a few entries; node 3 answers high
#     watermarks it learns from the leaders).
# Prints the time, the catch-up rate, and the data directory sizes of the three nodes (right after
# the catch-up and SETTLE_S seconds later).
#
# With RETENTION_BYTES (each partition's `retention_bytes`; the nodes check retention every
# second), the leaders trim and purge their raft logs while node 3 is down, so node 3 comes back
# behind the purge: it installs a snapshot (a checkpoint before the log start) and replays the
# retained entries. Then "has the data" means its own replica's log start and high watermark
# (`herald_replica_*` gauges) equal node 1's on every partition, and the run prints the snapshots
# node 3 installed.
#
#   benches/cluster-catchup.sh                           # 1 GiB of 1 KB messages
#   RETENTION_BYTES=134217728 benches/cluster-catchup.sh # the same, 128 MiB retained a partition
#   BYTES=50000000 benches/cluster-catchup.sh            # a quick smoke run (50 MB)
#   HERALD=path/to/herald PARTITIONS=1 benches/cluster-catchup.sh
set -euo pipefail

BYTES=${BYTES:-1073741824}
MSG_SIZE=${MSG_SIZE:-1024}
BATCH=${BATCH:-1000}
CONNECTIONS=${CONNECTIONS:-8}
PARTITIONS=${PARTITIONS:-3}
CATCHUP_TIMEOUT_S=${CATCHUP_TIMEOUT_S:-1800}
SETTLE_S=${SETTLE_S:-30}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-1200}   # a deadline for each load-generator run
BASE_HTTP=${BASE_HTTP:-19480}
BASE_RAFT=${BASE_RAFT:-19470}
EXTRA_ARGS=${EXTRA_ARGS:-}
RETENTION_BYTES=${RETENTION_BYTES:-}
[ -z "$RETENTION_BYTES" ] || EXTRA_ARGS="$EXTRA_ARGS --retention-check-interval-ms 1000"
KEEP_LOGS=${KEEP_LOGS:-}        # a directory to copy every node's log into before cleanup
TOPIC=catchup
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" catchup

appended_bytes() {
    curl -sf -m 5 "$(url "$1" /metrics)" | awk '$1 == "herald_raft_log_appended_bytes_total" {printf "%.0f", $2; found=1} END {if (!found) print 0}'
}
# marks NODE: node NODE's own replica of each partition, "log_start:high_watermark" in partition
# order, from its gauges.
marks() {
    curl -sf -m 5 "$(url "$1" /metrics)" | python3 -c "
import re, sys
found = {}
for line in sys.stdin:
    m = re.match(r'herald_replica_(log_start_offset|high_watermark)\{(.*)\} (\S+)', line)
    if m and 'topic=\"$TOPIC\"' in m.group(2):
        part = int(re.search(r'partition=\"(\d+)\"', m.group(2)).group(1))
        found.setdefault(part, {})[m.group(1)] = int(float(m.group(3)))
print(' '.join('%s:%s' % (found.get(i, {}).get('log_start_offset'), found.get(i, {}).get('high_watermark')) for i in range($PARTITIONS)))"
}
snapshot_installs() {
    curl -sf -m 5 "$(url "$1" /metrics)" | awk '$1 ~ /^herald_raft_snapshot_installs_total/ {s += $2} END {printf "%d", s}'
}
# views: the topic as each reachable node sees it, one JSON object {"1": {...}, "2": ...}.
views() {
    local id first=1
    printf '{'
    for id in 1 2 3; do
        local v
        v=$(curl -sf -m 5 "$(url "$id" "/v1/topics/$TOPIC")" 2>/dev/null) || continue
        [ "$first" = 1 ] || printf ','
        printf '"%s":%s' "$id" "$v"
        first=0
    done
    printf '}\n'
}
# exact STATE_PY: evaluates STATE_PY with `exact` = for every partition, the view of the node that
# leads it (None where no node claims it), and `views`.
exact() {
    views | python3 -c "
import json, sys
views = json.load(sys.stdin)
exact = [next((v['partitions'][i] for n, v in views.items()
               if len(v['partitions']) > i and v['partitions'][i]['leader'] == int(n)), None)
         for i in range($PARTITIONS)]
print($1)"
}

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
echo "machine: $(nproc) cores shared by the 3 nodes and the load generator; data in $DIR ($(df -PT "$DIR" | awk 'NR == 2 {print $2}'))"
echo "load average before the run: $(cut -d" " -f1-3 /proc/loadavg)"
start_cluster
if [ -n "$RETENTION_BYTES" ]; then
    curl -sS --fail-with-body -m 120 -XPOST "$(url 1 /v1/topics)" -H 'content-type: application/json' \
        -d "{\"name\":\"$TOPIC\",\"partitions\":$PARTITIONS,\"replication_factor\":3,\"config\":{\"retention_bytes\":$RETENTION_BYTES}}" >/dev/null
    echo "retention: $RETENTION_BYTES B a partition, checked every second"
else
    create_topic 1 "$TOPIC" "$PARTITIONS" 3
fi
deadline=$(( $(now_ms) + 120000 ))
until [ "$(exact "all(p and p['leader'] == p['replicas'][0] and len(p['in_sync']) == 3 for p in exact)")" = True ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "topic never settled" >&2; views >&2; exit 1; }
    sleep 0.2
done
echo "topic $TOPIC: $PARTITIONS partitions, replication factor 3, leaders $(exact "[p['leader'] for p in exact]")"

kill -9 "${PIDS[3]}"
wait "${PIDS[3]}" 2>/dev/null || true
unset "PIDS[3]"
echo "SIGKILLed node 3"
deadline=$(( $(now_ms) + 60000 ))
until [ "$(exact "all(p and p['leader'] != 3 for p in exact)")" = True ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "partitions of node 3 never failed over" >&2; views >&2; exit 1; }
    sleep 0.2
done
echo "leaders without node 3: $(exact "[p['leader'] for p in exact]")"

before1=$(appended_bytes 1)
messages=$(( BYTES / MSG_SIZE ))
cpu0="$(busy_ticks) $(node_ticks) $(child_ticks) $(now_ms)"
echo "producing $messages messages of $MSG_SIZE B ($(( messages * MSG_SIZE )) B) through node 1, acks=all..."
bench_produce 1 --topic "$TOPIC" --message-size "$MSG_SIZE" --batch-size "$BATCH" --connections "$CONNECTIONS" \
    --messages "$messages" --acks all >"$DIR/produce.json"
json "f\"produced {d['messages']:,} messages in {d['seconds']:.1f} s: {d['messages_per_sec']:,.0f} msg/s, {d['mb_per_sec']:.1f} MB/s, p99 {d['latency_ms']['p99']:.1f} ms, errors {d['errors']} {d['error_samples'][:3]}\"" <"$DIR/produce.json"
# shellcheck disable=SC2086
echo "  (CPU outside herald and the load generator: $(foreign_pct $cpu0)% of the machine during the produce)"
[ "$(json "d['errors']" <"$DIR/produce.json")" = 0 ] || echo "WARNING: the produce run had errors" >&2
sleep 2   # the leaders' reports travel with their pings (at most a second)
hws=$(exact "[p['high_watermark'] for p in exact]")
total_hw=$(exact "sum(p['high_watermark'] for p in exact)")
missed=$(( $(appended_bytes 1) - before1 ))
echo "leaders' high watermarks: $hws (sum $total_hw); node 1 appended $missed raft-log bytes while node 3 was down"
if [ -n "$RETENTION_BYTES" ]; then
    sleep 3   # a retention check, and the gauges published after it
    echo "node 1's replicas (log start:high watermark): $(marks 1)"
fi
du -sb "$DIR/d1" "$DIR/d2" "$DIR/d3" | sed "s|$DIR/||; s|^|  before restart: |"

log3_lines=$(wc -l <"$DIR/log3")
cpu0="$(busy_ticks) $(node_ticks) $(child_ticks)"
started=$(now_ms)
start_node 3
ready_ms="" in_sync_ms="" hw_ms="" data_ms="" done_ms=""
deadline=$(( started + CATCHUP_TIMEOUT_S * 1000 ))
while :; do
    now=$(now_ms)
    [ -n "$ready_ms" ] || { curl -sf -m 1 "$(url 3 /readyz)" >/dev/null 2>&1 && ready_ms=$(( now - started )); }
    if [ -n "$ready_ms" ]; then
        state=$(exact "'%s %s' % (all(p and 3 in p['in_sync'] for p in exact), '3' in views and [p['high_watermark'] for p in views['3']['partitions']] == $hws)")
        [ -n "$in_sync_ms" ] || { [ "${state% *}" = True ] && in_sync_ms=$(( now - started )); }
        [ -n "$hw_ms" ] || { [ "${state#* }" = True ] && hw_ms=$(( now - started )); }
        if [ -n "$RETENTION_BYTES" ]; then
            [ -n "$data_ms" ] || { [ "$(marks 3)" = "$(marks 1)" ] && data_ms=$(( now - started )); }
        else
            [ -n "$data_ms" ] || { [ "$(appended_bytes 3)" -ge "$missed" ] && data_ms=$(( now - started )); }
        fi
        if [ -n "$in_sync_ms" ] && [ -n "$hw_ms" ] && [ -n "$data_ms" ] && [ "$state" = "True True" ]; then
            done_ms=$(( now - started ))
            break
        fi
    fi
    [ "$now" -lt "$deadline" ] || {
        echo "node 3 did not catch up in ${CATCHUP_TIMEOUT_S} s (ready ${ready_ms:-no}, in_sync ${in_sync_ms:-no}, hw ${hw_ms:-no}, data ${data_ms:-no}; node 3 appended $(appended_bytes 3) of $missed bytes)" >&2
        views >&2
        exit 1
    }
    sleep 0.2
done
# shellcheck disable=SC2086
foreign=$(foreign_pct $cpu0 "$started")
appended3=$(appended_bytes 3)
echo "node 3 restarted: ready after ${ready_ms} ms, in sync on every partition after ${in_sync_ms} ms," \
    "reports the leaders' high watermarks after ${hw_ms} ms, holds the data after ${data_ms} ms (appended $appended3 raft-log bytes; node 1 appended $missed while it was down);" \
    "all three at once after ${done_ms} ms (CPU outside herald: ${foreign}% of the machine meanwhile)"
if [ -n "$RETENTION_BYTES" ]; then
    echo "node 3's replicas $(marks 3), node 1's $(marks 1); snapshots node 3 installed: $(snapshot_installs 3)"
fi
python3 -c "
t = $done_ms / 1000
print(f'catch-up: {t:.1f} s from restart to caught up; {$BYTES / 1e6 / t:.1f} MB/s of message values, {$appended3 / 1e6 / t:.1f} MB/s of raft log')"

# Leadership of node 3's preferred partitions returns to it once it is in sync.
deadline=$(( $(now_ms) + 60000 ))
until [ "$(exact "all(p and p['leader'] == p['replicas'][0] for p in exact)")" = True ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "leaders not back to the preferred replicas after 60 s: $(exact "[p['leader'] for p in exact]")"; break; }
    sleep 0.2
done
echo "leaders $(exact "[p['leader'] for p in exact]") (preferred $(exact "[p['replicas'][0] for p in exact]")) $(( $(now_ms) - started )) ms after the restart"
echo "data directory sizes after catch-up:"
du -sb "$DIR/d1" "$DIR/d2" "$DIR/d3" | sed "s|$DIR/||; s|^|  |"
# RocksDB flushes and compacts in the background: the sizes once that has had time to settle.
sleep "$SETTLE_S"
echo "data directory sizes ${SETTLE_S} s later:"
du -sb "$DIR/d1" "$DIR/d2" "$DIR/d3" | sed "s|$DIR/||; s|^|  |"
for id in 1 2 3; do
    printf '  log%s: %s leader elections won, %s WARN, %s ERROR lines (whole run)\n' "$id" \
        "$(grep -c 'becomes leader' "$DIR/log$id" || true)" "$(grep -c ' WARN' "$DIR/log$id" || true)" \
        "$(grep -c ' ERROR' "$DIR/log$id" || true)"
done
log_after "$DIR/log3" "$log3_lines" >"$DIR/log3-restart"
echo "node 3 since its restart: $(grep -c 'becomes leader' "$DIR/log3-restart" || true) leader elections won," \
    "$(grep -c ' WARN\| ERROR' "$DIR/log3-restart" || true) WARN/ERROR lines; the most frequent:"
top_warnings 5 "$DIR/log3-restart"
