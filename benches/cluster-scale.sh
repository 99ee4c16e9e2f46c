#!/usr/bin/env bash
# Does a cluster produce faster than a node? Each of RUNS rounds starts fresh data directories
# and produces the same load (100 B messages, BATCH per request, acks=all) to a topic of
# PARTITIONS partitions:
#   1 node:  replication factor 1, one load generator against it;
#   3 nodes: replication factor 3, leaders spread, one load generator per node, each sending a
#            third of the messages to every partition (a node forwards what it does not lead);
#   5 nodes: the same with 5 nodes (FIVE=0 leaves it out).
# It prints messages/s (all generators' messages over the longest one's time), the worst p99 of
# the generators, and the CPU the herald processes spent per message (the nodes' user+system
# time over the messages: on this machine every node shares the same cores, so throughput
# cannot grow with nodes; the claim checked is that the cost of a message does not). Medians over
# the rounds and ratios to one node.
#
#   benches/cluster-scale.sh                       # 3 rounds, 1, 3 and 5 nodes
#   RUNS=1 MESSAGES=1000000 benches/cluster-scale.sh   # a quick smoke run
set -euo pipefail

RUNS=${RUNS:-3}
PARTITIONS=${PARTITIONS:-12}
CONNECTIONS=${CONNECTIONS:-8}   # per load generator
BATCH=${BATCH:-1000}
MESSAGES=${MESSAGES:-3000000}   # per setup and round, split over the generators
FIVE=${FIVE:-1}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-900}
BASE_HTTP=${BASE_HTTP:-19480}
BASE_RAFT=${BASE_RAFT:-19470}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_LOGS=${KEEP_LOGS:-}
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" scale

# initial_cluster N: the --initial-cluster of nodes 1..N.
initial_cluster() {
    local id sep= out=
    for id in $(seq 1 "$1"); do out="$out$sep$id=127.0.0.1:$((BASE_RAFT + id))"; sep=,; done
    echo "$out"
}

# run_setup NODES ROUND: starts NODES nodes (node 0 alone for 1), creates the topic, runs one
# generator per node, appends a result line to results.tsv, stops the nodes.
run_setup() {
    local nodes=$1 round=$2 rf id ids members
    if [ "$nodes" = 1 ]; then
        ids=(0); rf=1
        start_node_at 0 "$DIR/r$round-n1-d0" "$DIR/r$round-n1-log0"
    else
        ids=($(seq 1 "$nodes")); rf=3
        members=$(initial_cluster "$nodes")
        for id in "${ids[@]}"; do
            start_node_at "$id" "$DIR/r$round-n$nodes-d$id" "$DIR/r$round-n$nodes-log$id" --initial-cluster "$members"
        done
    fi
    for id in "${ids[@]}"; do wait_ready "$id"; done
    local deadline=$(( $(now_ms) + 60000 ))
    until [ "$(curl -sf -m 5 "$(url "${ids[0]}" /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = "$nodes" ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "nodes never all up" >&2; exit 1; }
        sleep 0.2
    done
    create_topic "${ids[0]}" load "$PARTITIONS" "$rf"
    wait_topics 120 "${ids[0]}" "p['leader'] == p['replicas'][0] and len(p['in_sync']) == $rf" load
    sleep 1
    local each=$(( MESSAGES / ${#ids[@]} )) nodes0 started
    nodes0=$(node_ticks) started=$(now_ms)
    local generators=()
    for id in "${ids[@]}"; do
        bench_produce "$id" --topic load --message-size 100 --batch-size "$BATCH" \
            --connections "$CONNECTIONS" --messages "$each" --acks all >"$DIR/out$id.json" &
        generators+=($!)
    done
    # Only the generators: a bare `wait` would wait for the nodes too.
    for id in "${generators[@]}"; do wait "$id" || { echo "a load generator failed" >&2; exit 1; }; done
    local cpu_ticks=$(( $(node_ticks) - nodes0 )) wall_ms=$(( $(now_ms) - started ))
    python3 - "$nodes" "$round" "$cpu_ticks" "$HZ" "$wall_ms" "$DIR"/out*.json >>"$DIR/results.tsv" <<'PY'
import json, sys
nodes, round_, ticks, hz, wall_ms = sys.argv[1:6]
runs = [json.load(open(path)) for path in sys.argv[6:]]
messages = sum(r["messages"] for r in runs)
seconds = max(r["seconds"] for r in runs)
print("\t".join(str(v) for v in (
    nodes, round_, round(messages / seconds), max(r["latency_ms"]["p99"] for r in runs),
    1e6 * int(ticks) / int(hz) / messages, sum(r["errors"] for r in runs), messages)))
PY
    rm -f "$DIR"/out*.json
    tail -1 "$DIR/results.tsv" | awk -F'\t' '{printf "round %s  %s node(s): %10.0f msg/s  p99 %7.1f ms  %6.2f CPU-us/msg  errors %s\n", $2, $1, $3, $4, $5, $6}'
    for id in "${ids[@]}"; do kill "${PIDS[$id]}" 2>/dev/null || true; done
    for id in "${ids[@]}"; do wait "${PIDS[$id]}" 2>/dev/null || true; unset "PIDS[$id]"; done
    rm -rf "$DIR"/r"$round"-n"$nodes"-d*
}

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
echo "machine: $(nproc) cores; $RUNS rounds; $PARTITIONS partitions, $MESSAGES x 100 B per setup," \
    "$BATCH per request, $CONNECTIONS connections per generator, acks=all"
: >"$DIR/results.tsv"
setups="1 3"
[ "$FIVE" = 1 ] && setups="$setups 5"
for round in $(seq 1 "$RUNS"); do
    for nodes in $setups; do run_setup "$nodes" "$round"; done
done

python3 - "$DIR/results.tsv" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    nodes, _round, rate, p99, cpu, errors, _messages = line.split("\t")
    rows.setdefault(int(nodes), []).append((float(rate), float(p99), float(cpu), int(errors)))
print()
print(f"{'medians':8} {'runs':>4} {'msgs/s':>10} {'p99 ms':>8} {'CPU-us/msg':>10} {'per replica':>11} {'errors':>6}   ratio to 1 node: msgs/s  p99  CPU/msg  CPU/replica")
base = None
for nodes in sorted(rows):
    runs = rows[nodes]
    rate = statistics.median(r[0] for r in runs)
    p99 = statistics.median(r[1] for r in runs)
    cpu = statistics.median(r[2] for r in runs)
    replicas = 1 if nodes == 1 else 3
    line = f"{str(nodes) + ' node':8} {len(runs):>4} {rate:>10,.0f} {p99:>8.1f} {cpu:>10.2f} {cpu / replicas:>11.2f} {sum(r[3] for r in runs):>6}"
    if base is None:
        base = (rate, p99, cpu)
    else:
        line += f"   {rate / base[0]:>22.2f} {p99 / base[1]:>4.2f} {cpu / base[2]:>8.2f} {cpu / replicas / base[2]:>12.2f}"
    print(line)
PY
