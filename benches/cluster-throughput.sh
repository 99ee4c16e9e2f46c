#!/usr/bin/env bash
# Produce throughput and latency with replication factor 3 on a 3-node cluster on this machine,
# as a ratio to a single node measured in the same run. Each of RUNS rounds starts from fresh
# data directories and runs the same `herald bench produce` load (acks=all) against:
#   rf1: one node (no --initial-cluster), a topic of PARTITIONS partitions, replication factor 1;
#   rf3: three nodes, a topic of PARTITIONS partitions, replication factor 3, leaders spread over
#        the nodes (the load starts once every partition has 3 in-sync replicas and is led by
#        its preferred replica).
# `herald bench produce` talks to one server, so the rf3 load goes to node 1, which forwards the
# partitions it does not lead (2/3 of them with leaders spread) to their leaders.
# Prints every round, the medians, and the rf3/rf1 ratio of the medians.
#
#   benches/cluster-throughput.sh                 # 3 rounds, 100 B and 1 KB messages
#   RUNS=5 WITH_1K=0 benches/cluster-throughput.sh
#   MSGS_100=2000000 MSGS_1K=300000 RUNS=1 benches/cluster-throughput.sh   # a quick smoke run
set -euo pipefail

RUNS=${RUNS:-3}
PARTITIONS=${PARTITIONS:-4}
CONNECTIONS=${CONNECTIONS:-8}
BATCH=${BATCH:-1000}
MSGS_100=${MSGS_100:-6000000}   # 100-byte messages per run (~13 s on one node here)
MSGS_1K=${MSGS_1K:-1000000}     # 1 KB messages per run
WITH_1K=${WITH_1K:-1}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-1200}   # a deadline for each load-generator run
BASE_HTTP=${BASE_HTTP:-19380}
BASE_RAFT=${BASE_RAFT:-19370}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_LOGS=${KEEP_LOGS:-}        # a directory to copy every node's log into before cleanup
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" throughput

# stop_node ID: SIGTERM, then SIGKILL if it is still there after 20 s.
stop_node() {
    local id=$1 pid=${PIDS[$1]} deadline=$(( $(now_ms) + 20000 ))
    kill "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$(now_ms)" -ge "$deadline" ]; then
            echo "node $id did not stop in 20 s; killing it" >&2
            kill -9 "$pid" 2>/dev/null || true
        fi
        sleep 0.1
    done
    wait "$pid" 2>/dev/null || true
    unset "PIDS[$id]"
}

# create_settled NODE TOPIC RF: creates the topic and waits until every partition is led by its
# preferred replica (the first of `replicas`) and has RF in-sync replicas, as node NODE sees it.
create_settled() {
    local node=$1 topic=$2 rf=$3
    create_topic "$node" "$topic" "$PARTITIONS" "$rf"
    wait_topics 120 "$node" "p['leader'] == p['replicas'][0] and len(p['in_sync']) == $rf" "$topic"
    sleep 1   # let the last in-sync ping and any leadership hand-back pass
}

# bench SETUP NODE TOPIC SIZE COUNT ROUND LOG...: one produce run, a JSON line in results.tsv;
# then what the node logs said during the run (leader elections won, warnings).
bench() {
    local setup=$1 node=$2 topic=$3 size=$4 count=$5 round=$6 out log
    shift 6
    local -A lines
    for log in "$@"; do lines[$log]=$(wc -l <"$log"); done
    local busy0 nodes0 children0 started foreign
    busy0=$(busy_ticks) nodes0=$(node_ticks) children0=$(child_ticks) started=$(now_ms)
    out=$(bench_produce "$node" --topic "$topic" --message-size "$size" --batch-size "$BATCH" \
        --connections "$CONNECTIONS" --messages "$count" --acks all)
    # The share of the machine spent outside the nodes and the load generator during the run.
    foreign=$(foreign_pct "$busy0" "$nodes0" "$children0" "$started")
    printf '%s\t%s\t%s\t%s\t%s\n' "$setup" "$size" "$round" "$foreign" "$out" >>"$DIR/results.tsv"
    echo "$out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
l = r['latency_ms']
print(f'round $round  $setup  $size B: {r[\"messages_per_sec\"]:>10,.0f} msg/s {r[\"mb_per_sec\"]:6.1f} MB/s {r[\"seconds\"]:6.1f} s  '
      f'p50 {l[\"p50\"]:7.1f}  p99 {l[\"p99\"]:7.1f}  p99.9 {l[\"p999\"]:7.1f} ms  errors {r[\"errors\"]}  '
      f'(outside herald: $foreign% of the machine)')
if r['errors']:
    print('  error samples:', r['error_samples'], file=sys.stderr)
"
    for log in "$@"; do
        log_after "$log" "${lines[$log]}" >"$DIR/window.log"
        local won warns
        won=$(grep -c 'becomes leader' "$DIR/window.log" || true)
        warns=$(grep -c ' WARN\| ERROR' "$DIR/window.log" || true)
        if [ "$won" != 0 ] || [ "$warns" != 0 ]; then
            echo "  during the run, $(basename "$log" .log): $won leader elections won, $warns WARN/ERROR lines, e.g.:"
            top_warnings 3 "$DIR/window.log"
        fi
    done
}

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); $RUNS rounds;" \
    "$PARTITIONS partitions, $BATCH messages/request, $CONNECTIONS connections, acks=all"
echo "load average before the run: $(cut -d" " -f1-3 /proc/loadavg)"
: >"$DIR/results.tsv"
for round in $(seq 1 "$RUNS"); do
    # rf1: one node.
    start_node_at 0 "$DIR/single$round" "$DIR/single$round.log"
    wait_ready 0
    create_settled 0 p100 1
    bench rf1 0 p100 100 "$MSGS_100" "$round" "$DIR/single$round.log"
    if [ "$WITH_1K" = 1 ]; then
        create_settled 0 p1k 1
        bench rf1 0 p1k 1024 "$MSGS_1K" "$round" "$DIR/single$round.log"
    fi
    stop_node 0
    rm -rf "$DIR/single$round"

    # rf3: three nodes, load through node 1.
    for id in 1 2 3; do start_node_at "$id" "$DIR/c$round-d$id" "$DIR/c$round-node$id.log" --initial-cluster "$CLUSTER"; done
    wait_cluster
    create_settled 1 p100 3
    bench rf3 1 p100 100 "$MSGS_100" "$round" "$DIR"/c"$round"-node{1,2,3}.log
    if [ "$WITH_1K" = 1 ]; then
        create_settled 1 p1k 3
        bench rf3 1 p1k 1024 "$MSGS_1K" "$round" "$DIR"/c"$round"-node{1,2,3}.log
    fi
    # Leadership after the load: still the preferred replicas?
    for topic in p100 $([ "$WITH_1K" = 1 ] && echo p1k); do
        curl -sf -m 5 "$(url 1 "/v1/topics/$topic")" | json "'  after the load, $topic leaders ' + str([p['leader'] for p in d['partitions']]) + ', preferred ' + str([p['replicas'][0] for p in d['partitions']]) + ', in_sync ' + str([len(p['in_sync']) for p in d['partitions']])"
    done
    for id in 1 2 3; do stop_node "$id"; done
    rm -rf "$DIR/c$round-d1" "$DIR/c$round-d2" "$DIR/c$round-d3"
done

python3 - "$DIR/results.tsv" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    setup, size, _round, foreign, text = line.rstrip("\n").split("\t", 4)
    rows.setdefault((setup, int(size)), []).append(dict(json.loads(text), foreign=int(foreign)))
def med(key, runs):
    if key in ("p50", "p99", "p999"):
        return statistics.median(r["latency_ms"][key] for r in runs)
    return statistics.median(r[key] for r in runs)
print()
print(f"{'medians':14} {'runs':>4} {'msgs/s':>10} {'MB/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'errors':>6} {'outside %':>9}")
for (setup, size), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{setup + ' ' + str(size) + ' B':14} {len(runs):>4} {med('messages_per_sec', runs):>10,.0f} "
          f"{med('mb_per_sec', runs):>7.1f} {med('p50', runs):>8.1f} {med('p99', runs):>8.1f} "
          f"{med('p999', runs):>9.1f} {sum(r['errors'] for r in runs):>6} {max(r['foreign'] for r in runs):>9}")
print("(outside %: the largest share of the machine spent outside herald and the load generator during one")
print(" of the runs: other processes, and the kernel's loopback and writeback work; a few % is normal)")
print()
for size in sorted({size for _, size in rows}):
    one, three = rows.get(("rf1", size)), rows.get(("rf3", size))
    if one and three:
        print(f"{size} B rf3/rf1 (ratio of medians): msg/s {med('messages_per_sec', three) / med('messages_per_sec', one):.2f}, "
              f"p50 {med('p50', three) / med('p50', one):.2f}, p99 {med('p99', three) / med('p99', one):.2f}")
PY
