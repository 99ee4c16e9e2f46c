#!/usr/bin/env bash
# Backup and restore of one node (docs/operations.md#physical-backup-a-nodes-data-directory):
# a node alone holding BYTES of MSG_SIZE-byte messages in PARTITIONS partitions; RUNS backups are
# taken while it runs (`herald backup`: a RocksDB checkpoint, hard links) and timed, as is a copy
# of the same data with `cp -a` (the baseline, same run); then the node is stopped, restored from
# the first backup into a fresh data directory (`herald restore`), started on it, and checked to
# hold the same high watermarks. Prints the backup's median time against cp's, the restore's time
# and the restart's.
#
#   benches/backup.sh                     # 1 GiB of 1 KB messages
#   BYTES=100000000 benches/backup.sh     # a quick run
set -euo pipefail

BYTES=${BYTES:-1073741824}
MSG_SIZE=${MSG_SIZE:-1024}
PARTITIONS=${PARTITIONS:-4}
RUNS=${RUNS:-3}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-1800}
BASE_HTTP=${BASE_HTTP:-19680}
BASE_RAFT=${BASE_RAFT:-19670}
EXTRA_ARGS=""
KEEP_LOGS=${KEEP_LOGS:-}
TOPIC=backed-up
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" backup

hws() { curl -sf -m 5 "$(url 0 "/v1/topics/$TOPIC")" | json "[p['high_watermark'] for p in d['partitions']]"; }

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
start_node 0
wait_ready 0
create_topic 0 "$TOPIC" "$PARTITIONS" 1
messages=$(( BYTES / MSG_SIZE ))
bench_produce 0 --topic "$TOPIC" --message-size "$MSG_SIZE" --batch-size 1000 --connections 8 \
    --messages "$messages" --acks all >"$DIR/produce.json"
json "f\"produced {d['messages']:,} messages ({d['mb_per_sec']:.1f} MB/s), errors {d['errors']}\"" <"$DIR/produce.json"
before=$(hws)
du -sb "$DIR/d0" | sed "s|$DIR/||; s|^|  data directory: |"
backup_ms=() copy_ms=()
for run in $(seq 1 "$RUNS"); do
    started=$(now_ms)
    "$HERALD" backup --name "run-$run" --server "$(url 0 "")" >"$DIR/backup-$run.json"
    backup_ms+=( $(( $(now_ms) - started )) )
    started=$(now_ms)
    cp -a "$DIR/d0" "$DIR/copy-$run"
    copy_ms+=( $(( $(now_ms) - started )) )
    rm -rf "$DIR/copy-$run"
    json "f\"run $run: backup {d['total_bytes']:,} B, {len(d['files'])} files, {d['took_ms']} ms on the node; \"" <"$DIR/backup-$run.json" | tr -d '\n'
    echo "herald backup ${backup_ms[-1]} ms, cp -a ${copy_ms[-1]} ms"
done
backup_median=$(echo "${backup_ms[@]}" | median)
copy_median=$(echo "${copy_ms[@]}" | median)
python3 -c "print(f'backup: median {$backup_median:.0f} ms against cp -a {$copy_median:.0f} ms: {$backup_median / max($copy_median, 1):.3f}x the time of a copy')"

kill "${PIDS[0]}"
wait "${PIDS[0]}" 2>/dev/null || true
unset "PIDS[0]"
mv "$DIR/d0" "$DIR/lost"
started=$(now_ms)
"$HERALD" restore --data-dir "$DIR/d0" "$DIR/d0.backups/run-1"
echo "restore: $(( $(now_ms) - started )) ms"
started=$(now_ms)
start_node 0
wait_ready 0
echo "restart on the restored directory: ready after $(( $(now_ms) - started )) ms"
after=$(hws)
[ "$after" = "$before" ] || { echo "high watermarks differ: $before before, $after after" >&2; exit 1; }
echo "high watermarks after the restore equal those at the backup: $after"
