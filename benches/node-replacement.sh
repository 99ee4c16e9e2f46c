#!/usr/bin/env bash
# Replacing a lost node (docs/operations.md#replacing-a-lost-node): a 3-node cluster on this
# machine, a topic of PARTITIONS partitions with replication factor 3 holding BYTES of MSG_SIZE-byte
# messages. Node 3 is SIGKILLed and its data directory deleted (the disk is gone); node 4 starts
# with --join, is added, and node 3 is drained. Measures the time from the drain until node 3 has
# left and every partition lists nodes 1, 2 and 4 in sync, while a light acks=all producer runs
# through node 1 (its p99 against the same producer before the loss, same run). The rebuild is
# throttled by raft.catch_up_bytes_per_sec (CATCH_UP, bytes a second; default the node's 64 MiB/s).
#
#   benches/node-replacement.sh                      # 10 GiB of 1 KB messages (the issue's size)
#   BYTES=1073741824 benches/node-replacement.sh     # 1 GiB
#   BYTES=100000000 CATCH_UP=0 benches/node-replacement.sh  # a quick run, unthrottled
set -euo pipefail

BYTES=${BYTES:-10737418240}
MSG_SIZE=${MSG_SIZE:-1024}
BATCH=${BATCH:-1000}
CONNECTIONS=${CONNECTIONS:-8}
PARTITIONS=${PARTITIONS:-6}
PROBE_MESSAGES=${PROBE_MESSAGES:-20000}   # the light producer's messages, each phase
REBUILD_TIMEOUT_S=${REBUILD_TIMEOUT_S:-3600}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-7200}
BASE_HTTP=${BASE_HTTP:-19580}
BASE_RAFT=${BASE_RAFT:-19570}
CATCH_UP=${CATCH_UP:-}
EXTRA_ARGS=""
KEEP_LOGS=${KEEP_LOGS:-}
TOPIC=replaced
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" replacement
if [ -n "$CATCH_UP" ]; then
    printf '[raft]\ncatch_up_bytes_per_sec = %s\n' "$CATCH_UP" >"$DIR/herald.toml"
    EXTRA_ARGS="--config $DIR/herald.toml"
fi

probe() {   # probe NODE: a light acks=all producer; prints "p50 p99" in ms
    bench_produce "$1" --topic "$TOPIC" --message-size 100 --batch-size 10 --connections 1 \
        --messages "$PROBE_MESSAGES" --acks all >"$DIR/probe.json"
    json "'%.1f %.1f' % (d['latency_ms']['p50'], d['latency_ms']['p99'])" <"$DIR/probe.json"
}

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
echo "machine: $(nproc) cores shared by the nodes and the load generator; data in $DIR ($(df -PT "$DIR" | awk 'NR == 2 {print $2}'))"
start_cluster
create_topic 1 "$TOPIC" "$PARTITIONS" 3
wait_topics 120 1 "len(p['in_sync']) == 3" "$TOPIC"
messages=$(( BYTES / MSG_SIZE ))
echo "producing $messages messages of $MSG_SIZE B through node 1, acks=all..."
bench_produce 1 --topic "$TOPIC" --message-size "$MSG_SIZE" --batch-size "$BATCH" --connections "$CONNECTIONS" \
    --messages "$messages" --acks all >"$DIR/produce.json"
json "f\"produced {d['messages']:,} messages in {d['seconds']:.1f} s ({d['mb_per_sec']:.1f} MB/s), errors {d['errors']}\"" <"$DIR/produce.json"
du -sb "$DIR/d1" "$DIR/d2" "$DIR/d3" | sed "s|$DIR/||; s|^|  |"
echo "light producer before the loss (p50 p99 ms): $(probe 1)"

kill -9 "${PIDS[3]}"
wait "${PIDS[3]}" 2>/dev/null || true
unset "PIDS[3]"
rm -rf "$DIR/d3"
echo "node 3 SIGKILLed, its data directory deleted"
start_node 4 --join
curl -sf -m 60 --retry 30 --retry-delay 1 --retry-all-errors -XPOST "$(url 1 /v1/cluster/nodes)" \
    -H 'content-type: application/json' \
    -d "{\"node_id\":4,\"http_addr\":\"127.0.0.1:$((BASE_HTTP + 4))\",\"raft_addr\":\"127.0.0.1:$((BASE_RAFT + 4))\"}" >/dev/null
wait_ready 4
started=$(now_ms)
curl -sf -m 60 --retry 30 --retry-delay 1 --retry-all-errors -XDELETE "$(url 1 /v1/cluster/nodes/3)" >/dev/null
echo "node 4 added, node 3 draining"
( probe 1 >"$DIR/probe-during.txt" ) &
probe_pid=$!
deadline=$(( started + REBUILD_TIMEOUT_S * 1000 ))
until [ "$(curl -sf -m 5 "$(url 1 "/v1/topics/$TOPIC")" | json "all(sorted(p['replicas']) == [1, 2, 4] and sorted(p['in_sync']) == [1, 2, 4] for p in d['partitions'])" 2>/dev/null)" = True ] \
    && [ "$(curl -sf -m 5 "$(url 1 /v1/cluster)" | json "sorted(n['id'] for n in d['nodes'])" 2>/dev/null)" = "[1, 2, 4]" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "not rebuilt in ${REBUILD_TIMEOUT_S} s" >&2; exit 1; }
    sleep 0.5
done
took=$(( $(now_ms) - started ))
wait "$probe_pid" || true
du -sb "$DIR/d4" | sed "s|$DIR/||; s|^|  rebuilt: |"
echo "light producer during the rebuild (p50 p99 ms): $(cat "$DIR/probe-during.txt" 2>/dev/null || echo 'failed')"
python3 -c "
t = $took / 1000
gb = $BYTES / 2**30
print(f'rebuild of node 3 onto node 4: {gb:.2f} GiB of messages in {t:.1f} s ({t / 60:.2f} min; {gb * 1024 / t:.1f} MiB/s); aim: 15 min for 10 GiB')"
