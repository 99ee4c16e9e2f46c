#!/usr/bin/env bash
# `make bench`: every figure of the produce-path table (issue 15) in one run, next to the
# machine's own ceilings measured in the same run:
#   disk    sequential write with fdatasync after every 1 MiB (dd oflag=dsync): what the disk takes;
#           and the latency of one 100 KB append + fdatasync at a time: what one commit waits for;
#   sink    `herald bench produce` against `herald bench sink`, an HTTP server that discards what
#           it gets and answers as a produce would: what the load generator, loopback and HTTP
#           exchange take on this machine with no broker behind them.
# Rows (ROUNDS rounds each, medians; a fresh topic per round):
#   1000 x 1 KB per request, 1000 x 100 B per request, one 100 B message per POST on 64
#   connections, read 1000 x 1 KB per request (the 1 KB topic from its start: a catch-up read),
#   100 B batches at a tenth of the 100 B peak (p99, p99.9), one partition RF 3 on 3 local nodes;
#   binary-batch rows when `herald bench produce --help` offers --binary.
# Besides: bytes the node wrote to disk per value byte produced (/proc/PID/io write_bytes) for the
# 1 KB and 100 B rows, and the node's peak RSS (VmHWM) over the whole single-node run.
#
#   make bench                 # full run, about 10-15 min on 2 cores
#   QUICK=1 make bench         # a 2-minute smoke run: one round, small counts
#   HERALD=/path/to/herald benches/bench.sh   # measure another binary (no build)
#   HERALD=old LOADGEN=new benches/bench.sh    # an older node, driven by the same load generator
#
# Every figure is printed with the exact `herald bench` arguments in results.tsv (kept with
# KEEP=DIR). The machine is shared by the node and the load generator: compare figures of one run.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib/common.sh

QUICK=${QUICK:-}
if [ -n "$QUICK" ]; then
    ROUNDS=${ROUNDS:-1}; MSGS_1K=${MSGS_1K:-100000}; MSGS_100=${MSGS_100:-500000}
    MSGS_SINGLE=${MSGS_SINGLE:-20000}; MSGS_RF3=${MSGS_RF3:-200000}; DISK_MB=${DISK_MB:-256}
    TENTH_SECONDS=${TENTH_SECONDS:-5}; SYNC_COUNT=${SYNC_COUNT:-300}
else
    ROUNDS=${ROUNDS:-3}; MSGS_1K=${MSGS_1K:-1000000}; MSGS_100=${MSGS_100:-3000000}
    MSGS_SINGLE=${MSGS_SINGLE:-200000}; MSGS_RF3=${MSGS_RF3:-2000000}; DISK_MB=${DISK_MB:-1024}
    TENTH_SECONDS=${TENTH_SECONDS:-15}; SYNC_COUNT=${SYNC_COUNT:-2000}
fi
BASE_PORT=${BASE_PORT:-18400}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
KEEP=${KEEP:-}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-600}
if [ -z "${HERALD:-}" ]; then
    cargo build --release --bin herald >&2
    HERALD=${CARGO_TARGET_DIR:-target}/release/herald
fi
# The binary whose `herald bench` loads the node and serves the sink: comparing two nodes, keep
# it the same for both (an older binary may lack `bench sink`).
LOADGEN=${LOADGEN:-$HERALD}
DIR=$(mktemp -d "$BENCH_DIR/herald-bench.XXXXXX")
bench_cluster_secret
declare -a PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$KEEP" ]; then mkdir -p "$KEEP"; cp "$DIR"/*.tsv "$DIR"/*.log "$KEEP"/ 2>/dev/null || true; fi
    rm -rf "$DIR"
}
trap cleanup EXIT
RESULTS=$DIR/results.tsv
: >"$RESULTS"
HAS_BINARY=0
"$HERALD" bench produce --help | grep -q -- '--binary' && HAS_BINARY=1
HAS_BINARY_READ=0
"$HERALD" bench consume --help | grep -q -- '--binary' && HAS_BINARY_READ=1

# record ROW ROUND EXTRA_JSON OUTPUT: one result line (the bench's JSON with EXTRA merged in).
record() {
    python3 - "$1" "$2" "$3" "$4" >>"$RESULTS" <<'PY'
import json, sys
row, rnd, extra, out = sys.argv[1:]
r = json.loads(out)
r.update(json.loads(extra))
print(f"{row}\t{rnd}\t{json.dumps(r)}")
PY
}
# bench KIND PORT ARGS...: one `herald bench KIND` run against 127.0.0.1:PORT, its JSON on stdout.
bench() {
    local kind=$1 port=$2
    shift 2
    timeout "$BENCH_TIMEOUT_S" "$LOADGEN" bench "$kind" --server "http://127.0.0.1:$port" "$@" --json 2>>"$DIR/bench.log" ||
        { echo "herald bench $kind $* failed:" >&2; tail -5 "$DIR/bench.log" >&2; exit 1; }
}
write_bytes() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
# cpu_ticks: "busy total" jiffies of all cores so far (/proc/stat); cpu_busy BEFORE: the share of
# the machine's cores busy since BEFORE was taken (1.0: every core all the time), which says
# whether a row was bound by the CPU.
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
cpu_busy() {
    local now
    now=$(cpu_ticks)
    python3 -c "b0, t0 = map(int, '$1'.split()); b1, t1 = map(int, '$now'.split()); print(round((b1 - b0) / max(1, t1 - t0), 3))"
}
# settle PID: waits (at most 30 s) until PID wrote nothing for 2 s: flushes and compactions of
# what was produced count toward its write amplification.
settle() {
    local prev=-1 cur stable=0
    for _ in $(seq 1 60); do
        cur=$(write_bytes "$1")
        if [ "$cur" = "$prev" ]; then stable=$((stable + 1)); [ $stable -ge 4 ] && return; else stable=0; fi
        prev=$cur
        sleep 0.5
    done
}
# start_node ID DATA HTTP_PORT RAFT_PORT [FLAGS...]: a node in the background; its pid in NODE_PID.
start_node() {
    local id=$1 data=$2 http=$3 raft=$4
    shift 4
    "$HERALD" serve --node-id "$id" --data-dir "$data" --http-addr "127.0.0.1:$http" \
        --raft-addr "127.0.0.1:$raft" "$@" >>"$DIR/node$id-$http.log" 2>&1 &
    NODE_PID=$!
    PIDS+=("$NODE_PID")
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
delete_topic() { curl -sf -m 60 -XDELETE "http://127.0.0.1:$1/v1/topics/$2" >/dev/null || true; }

echo "herald: $HERALD ($("$HERALD" --version)), load generator $LOADGEN; $(nproc) cores; rounds $ROUNDS${QUICK:+ (QUICK)}" >&2

# --- Ceiling 1: the disk, sequential writes with fdatasync after each MiB.
for round in $(seq 1 "$ROUNDS"); do
    started=$(now_ms)
    dd if=/dev/zero of="$DIR/dd" bs=1M count="$DISK_MB" oflag=dsync status=none
    ms=$(( $(now_ms) - started ))
    rm -f "$DIR/dd"
    record disk "$round" '{}' "{\"mb_per_sec\": $(python3 -c "print($DISK_MB * 1048576 / 1e6 / ($ms / 1000))")}"
done

# --- Ceiling 1b: the disk's sync latency, one 100 KB append + fdatasync at a time (what a lone
# 1000 x 100 B request's group commit waits for): the floor under the tenth-of-peak row's p99.
for round in $(seq 1 "$ROUNDS"); do
    record disk-sync "$round" '{}' "$(python3 - "$DIR/sync" "$SYNC_COUNT" <<'PY'
import json, os, sys, time
path, count = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
block, took = os.urandom(100_000), []
for _ in range(count):
    started = time.perf_counter()
    os.write(fd, block)
    os.fdatasync(fd)
    took.append((time.perf_counter() - started) * 1000)
os.close(fd)
os.unlink(path)
took.sort()
pick = lambda q: took[min(len(took) - 1, int(q * len(took)))]
print(json.dumps({"p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999), "max_ms": took[-1]}))
PY
)"
done

# --- Ceiling 2: the load generator and HTTP against a sink that does nothing.
SINK_PORT=$BASE_PORT
"$LOADGEN" bench sink --listen "127.0.0.1:$SINK_PORT" 2>>"$DIR/sink.log" &
SINK_PID=$!
PIDS+=("$SINK_PID")
wait_for_ports "$SINK_PORT"
for round in $(seq 1 "$ROUNDS"); do
    record sink-1KB "$round" '{}' "$(bench produce "$SINK_PORT" --topic s --message-size 1000 --batch-size 1000 --connections 8 --messages "$MSGS_1K")"
    record sink-100B "$round" '{}' "$(bench produce "$SINK_PORT" --topic s --message-size 100 --batch-size 1000 --connections 8 --messages "$MSGS_100")"
    record sink-single "$round" '{}' "$(bench produce "$SINK_PORT" --topic s --message-size 100 --raw --connections 64 --messages "$MSGS_SINGLE")"
done
stop_pid "$SINK_PID"

# --- One node: the produce and read rows, write amplification, peak RSS.
HTTP=$((BASE_PORT + 10))
start_node 1 "$DIR/single" "$HTTP" "$((HTTP + 1))"
NODE=$NODE_PID
wait_for_ports "$HTTP"
# produce_row ROW ROUND TOPIC SIZE COUNT [ARGS...]: a produce run with its write amplification.
produce_row() {
    local row=$1 round=$2 topic=$3 size=$4 count=$5 before out after
    shift 5
    settle "$NODE"
    before=$(write_bytes "$NODE")
    cpu=$(cpu_ticks)
    out=$(bench produce "$HTTP" --topic "$topic" --partitions 4 --message-size "$size" --connections 8 --messages "$count" "$@")
    cpu=$(cpu_busy "$cpu")
    settle "$NODE"
    after=$(write_bytes "$NODE")
    record "$row" "$round" "{\"disk_bytes_per_value_byte\": $(python3 -c "print(($after - $before) / ($size * $count))"), \"cpu_busy\": $cpu}" "$out"
}
for round in $(seq 1 "$ROUNDS"); do
    produce_row produce-1KB "$round" "k$round" 1000 "$MSGS_1K" --batch-size 1000
    record read-1KB "$round" '{}' "$(bench consume "$HTTP" --topic "k$round" --max-messages 1000 --messages "$MSGS_1K")"
    if [ "$HAS_BINARY_READ" = 1 ]; then
        record read-1KB-binary "$round" '{}' "$(bench consume "$HTTP" --topic "k$round" --max-messages 1000 --messages "$MSGS_1K" --binary)"
    fi
    delete_topic "$HTTP" "k$round"
    produce_row produce-100B "$round" "h$round" 100 "$MSGS_100" --batch-size 1000
    delete_topic "$HTTP" "h$round"
    if [ "$HAS_BINARY" = 1 ]; then
        produce_row produce-1KB-binary "$round" "kb$round" 1000 "$MSGS_1K" --batch-size 1000 --binary
        delete_topic "$HTTP" "kb$round"
        produce_row produce-100B-binary "$round" "hb$round" 100 "$MSGS_100" --batch-size 1000 --binary
        delete_topic "$HTTP" "hb$round"
    fi
    cpu=$(cpu_ticks)
    out=$(bench produce "$HTTP" --topic "s$round" --message-size 100 --raw --connections 64 --messages "$MSGS_SINGLE")
    record single-100B "$round" "{\"cpu_busy\": $(cpu_busy "$cpu")}" "$out"
    delete_topic "$HTTP" "s$round"
done
# A tenth of the median 100 B peak, in requests per second, for TENTH_SECONDS.
peak=$(python3 - "$RESULTS" <<'PY'
import json, statistics, sys
rates = [json.loads(l.split("\t")[2])["requests_per_sec"] for l in open(sys.argv[1]) if l.startswith("produce-100B\t")]
print(max(1.0, statistics.median(rates) / 10))
PY
)
for round in $(seq 1 "$ROUNDS"); do
    count=$(python3 -c "print(max(1000, int($peak * 1000 * $TENTH_SECONDS)))")
    record tenth-100B "$round" "{\"rate\": $peak}" "$(bench produce "$HTTP" --topic "t$round" --message-size 100 --batch-size 1000 --connections 8 --messages "$count" --rate "$peak")"
    delete_topic "$HTTP" "t$round"
done
RSS_KB=$(awk '/^VmHWM/ {print $2}' "/proc/$NODE/status")
stop_pid "$NODE"
rm -rf "$DIR/single"

# --- One partition, replication factor 3, on three local nodes.
for round in $(seq 1 "$ROUNDS"); do
    cluster="1=127.0.0.1:$((BASE_PORT + 31)),2=127.0.0.1:$((BASE_PORT + 32)),3=127.0.0.1:$((BASE_PORT + 33))"
    nodes=()
    for id in 1 2 3; do
        start_node "$id" "$DIR/rf3-$id" "$((BASE_PORT + 20 + id))" "$((BASE_PORT + 30 + id))" --initial-cluster "$cluster"
        nodes+=("$NODE_PID")
    done
    wait_for_ports "$((BASE_PORT + 21))" "$((BASE_PORT + 22))" "$((BASE_PORT + 23))"
    deadline=$(( $(now_ms) + 60000 ))
    until [ "$(curl -sf -m 5 "http://127.0.0.1:$((BASE_PORT + 21))/v1/cluster" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = 3 ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "the 3 nodes never all came up" >&2; exit 1; }
        sleep 0.2
    done
    curl -sS --fail-with-body -m 120 -XPOST "http://127.0.0.1:$((BASE_PORT + 21))/v1/topics" -H 'content-type: application/json' \
        -d '{"name":"rf3","partitions":1,"replication_factor":3}' >/dev/null
    deadline=$(( $(now_ms) + 60000 ))
    until [ "$(curl -sf -m 5 "http://127.0.0.1:$((BASE_PORT + 21))/v1/topics/rf3" | json "len(d['partitions'][0]['in_sync'])" 2>/dev/null)" = 3 ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "the rf3 partition never had 3 in-sync replicas" >&2; exit 1; }
        sleep 0.2
    done
    # The load goes to the partition's leader, so nothing is forwarded.
    leader=$(curl -sf "http://127.0.0.1:$((BASE_PORT + 21))/v1/topics/rf3" | json "(lambda l: l['id'] if isinstance(l, dict) else l)(d['partitions'][0]['leader'])")
    cpu=$(cpu_ticks)
    out=$(bench produce "$((BASE_PORT + 20 + leader))" --topic rf3 --message-size 100 --batch-size 1000 --connections 8 --messages "$MSGS_RF3")
    record rf3-100B "$round" "{\"cpu_busy\": $(cpu_busy "$cpu")}" "$out"
    for pid in "${nodes[@]}"; do stop_pid "$pid"; done
    rm -rf "$DIR"/rf3-*
done

python3 - "$RESULTS" "$RSS_KB" "$ROUNDS" <<'PY'
import json, statistics, sys
path, rss_kb, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for line in open(path):
    row, _, text = line.rstrip("\n").split("\t", 2)
    rows.setdefault(row, []).append(json.loads(text))
def med(row, key, sub=None):
    values = [r[key][sub] if sub else r[key] for r in rows.get(row, [])]
    return statistics.median(values) if values else None
def fmt(value, spec):
    return format(value, spec) if value is not None else "-"
disk = med("disk", "mb_per_sec")
print(f"\nCeilings measured in this run (medians of {rounds}):")
print(f"  disk, sequential write + fdatasync per MiB: {disk:,.0f} MB/s")
if "disk-sync" in rows:
    print(f"  disk, one 100 KB append + fdatasync at a time: p50 {med('disk-sync','p50_ms'):.2f} ms, "
          f"p99 {med('disk-sync','p99_ms'):.2f} ms, p99.9 {med('disk-sync','p999_ms'):.2f} ms, max {med('disk-sync','max_ms'):.1f} ms")
for row, label in [("sink-1KB", "1000 x 1 KB"), ("sink-100B", "1000 x 100 B"), ("sink-single", "single 100 B x 64 conn")]:
    print(f"  HTTP + load generator against a do-nothing sink, {label}: {med(row,'messages_per_sec'):,.0f} msgs/s, "
          f"{med(row,'mb_per_sec'):,.1f} MB/s, {med(row,'requests_per_sec'):,.0f} req/s, p99 {med(row,'latency_ms','p99'):.2f} ms")
print()
head = f"{'row':22} {'msgs/s':>11} {'MB/s':>8} {'req/s':>9} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8} {'/sink':>6} {'disk/ceil':>9} {'WA':>5} {'cpu':>5}  target"
print(head)
print("-" * len(head))
targets = {
    "produce-1KB": ">= 250 MB/s, p99 < 50 ms", "produce-1KB-binary": ">= 350 MB/s",
    "produce-100B": ">= 1,000,000 msgs/s", "produce-100B-binary": ">= 1,000,000 msgs/s",
    "single-100B": ">= 30,000 req/s, p99 < 5 ms", "read-1KB": "keep the lead (>= 556k msgs/s)",
    "read-1KB-binary": ">= 1 GB/s", "tenth-100B": "p99 < 5 ms, p99.9 < 10 ms",
    "rf3-100B": ">= 3x single-partition RF 3 before",
}
sinks = {"produce-1KB": "sink-1KB", "produce-1KB-binary": "sink-1KB", "produce-100B": "sink-100B",
         "produce-100B-binary": "sink-100B", "single-100B": "sink-single", "rf3-100B": "sink-100B"}
for row in ["produce-1KB", "produce-1KB-binary", "produce-100B", "produce-100B-binary", "single-100B",
            "read-1KB", "read-1KB-binary", "tenth-100B", "rf3-100B"]:
    if row not in rows:
        continue
    msgs = med(row, "messages_per_sec")
    sink = sinks.get(row)
    ratio = msgs / med(sink, "messages_per_sec") if sink and sink in rows else None
    wa = med(row, "disk_bytes_per_value_byte") if "disk_bytes_per_value_byte" in rows[row][0] else None
    disk_ratio = med(row, "mb_per_sec") * wa / disk if wa is not None else None
    cpu = med(row, "cpu_busy") if "cpu_busy" in rows[row][0] else None
    print(f"{row:22} {msgs:>11,.0f} {med(row,'mb_per_sec'):>8.1f} {med(row,'requests_per_sec'):>9,.0f} "
          f"{med(row,'latency_ms','p99'):>8.2f} {med(row,'latency_ms','p999'):>9.2f} {med(row,'latency_ms','max'):>8.1f} "
          f"{fmt(ratio, '6.2f'):>6} {fmt(disk_ratio, '9.2f'):>9} {fmt(wa, '5.2f'):>5} {fmt(cpu, '5.2f'):>5}  {targets[row]}")
    errors = sum(r["errors"] for r in rows[row])
    if errors:
        print(f"  {row}: {errors} failed requests, e.g. {rows[row][0]['error_samples'][:2]}")
print(f"\npeak RSS of the single node over its rows: {rss_kb / 1024:,.0f} MiB")
print("/sink: messages/s as a share of the same load against the do-nothing sink; disk/ceil: bytes the node "
      "wrote (MB/s x WA) as a share of the disk ceiling; WA: bytes written to disk per value byte produced; "
      "cpu: share of all cores busy during the row (node, load generator and all).")
PY
