# shellcheck shell=bash source-path=SCRIPTDIR
# What the cluster benchmarks (benches/cluster-*.sh) share: herald nodes of one cluster on this
# machine's loopback, the temporary directory they live in, and their cleanup. A script sets its
# settings, then sources this file with a name for its temporary directory:
#   . "$(dirname "$0")/lib/cluster.sh" NAME
#
# The script sets before sourcing it (all of them: '' where the bench has no such knob, so that
# the environment does not add one):
#   BASE_HTTP, BASE_RAFT  node ID listens on 127.0.0.1:BASE_HTTP+ID (HTTP) and BASE_RAFT+ID (raft)
#   EXTRA_ARGS            more `herald serve` flags for every node ('': none)
#   KEEP_LOGS             a directory to copy the logs and results in DIR (*.log log* *.json
#                         results.tsv) into before cleanup ('': none)
#   BENCH_TIMEOUT_S       only if it calls bench_produce: that one's deadline in seconds
# and may set HERALD (the binary; default $CARGO_TARGET_DIR/release/herald, with CARGO_TARGET_DIR
# defaulting to /var/tmp/herald-target).
#
# Sourcing it exports HERALD_CLUSTER_SECRET (the same for every node, unless set) and sets
# HERALD, DIR (a fresh /tmp/herald-NAME.XXXXXX, removed on exit), PIDS (node ID
# -> pid of the nodes running; all are SIGKILLed on exit), LOGS (node ID -> log file), CLUSTER
# (the --initial-cluster of nodes 1, 2 and 3) and HZ (clock ticks a second), and defines, besides
# lib/common.sh's now_ms, json and median:
#   url ID PATH                          the URL of PATH on node ID
#   start_node_at ID DATA LOG [FLAGS...] starts node ID on data directory DATA, appending its output
#                                        to LOG; node 0 is a single node (node id 1, ports BASE+0)
#   start_node ID [FLAGS...]             the same with DATA $DIR/dID and LOG $DIR/logID
#   ready_within ID SECONDS              waits up to SECONDS until node ID is ready; fails if not
#   wait_ready ID                        waits until node ID is ready (60 s at most), else exits
#   wait_cluster [SECONDS]               waits until nodes 1, 2 and 3 are ready and node 1 reports
#                                        all three up (SECONDS, 60 by default, at most)
#   start_cluster [SECONDS]              start_node 1, 2 and 3 with --initial-cluster, wait_cluster
#   create_topic NODE TOPIC PARTITIONS RF
#   wait_topics SECONDS NODE COND TOPIC...  waits until the Python expression COND holds for every
#                                        partition `p` of every TOPIC as node NODE reports them
#   bench_produce NODE ARGS...           `herald bench produce` against node NODE with ARGS, JSON
#                                        out; stderr to $DIR/bench.log; exits 1 on failure
#   proc_ticks PID, busy_ticks, node_ticks, child_ticks, foreign_pct  CPU accounting, see below
#   log_after LOG LINES, top_warnings N LOG  reading the nodes' logs
# Every wait exits the script (status 1) with a message on stderr when its time runs out.

# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
bench_cluster_secret
DIR=$(mktemp -d "/tmp/herald-$1.XXXXXX")
declare -A PIDS LOGS

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$KEEP_LOGS" ]; then
        mkdir -p "$KEEP_LOGS"
        cp "$DIR"/*.log "$DIR"/log* "$DIR"/*.json "$DIR"/results.tsv "$KEEP_LOGS"/ 2>/dev/null || true
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT

CLUSTER="1=127.0.0.1:$((BASE_RAFT + 1)),2=127.0.0.1:$((BASE_RAFT + 2)),3=127.0.0.1:$((BASE_RAFT + 3))"
url() { echo "http://127.0.0.1:$((BASE_HTTP + $1))$2"; }

start_node_at() {
    local id=$1 data=$2 log=$3
    shift 3
    # shellcheck disable=SC2086
    "$HERALD" serve --node-id "$(( id == 0 ? 1 : id ))" --data-dir "$data" \
        --http-addr "127.0.0.1:$((BASE_HTTP + id))" --raft-addr "127.0.0.1:$((BASE_RAFT + id))" \
        "$@" $EXTRA_ARGS >>"$log" 2>&1 &
    PIDS[$id]=$!
    LOGS[$id]=$log
}
start_node() {
    local id=$1
    shift
    start_node_at "$id" "$DIR/d$id" "$DIR/log$id" "$@"
}

ready_within() {
    local deadline=$(( $(now_ms) + $2 * 1000 ))
    until curl -sf -m 5 "$(url "$1" /readyz)" >/dev/null; do
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
wait_ready() {
    local id=$1
    ready_within "$id" 60 || {
        echo "node $id not ready: $(curl -s -m 10 "$(url "$id" /readyz)" | json "str(len(d.get('reasons', []))) + ' reasons, first: ' + '; '.join(d.get('reasons', [])[:5])" 2>/dev/null)" >&2
        tail -20 "${LOGS[$id]}" >&2; exit 1; }
}
wait_cluster() {
    local id deadline
    for id in 1 2 3; do wait_ready "$id"; done
    deadline=$(( $(now_ms) + ${1:-60} * 1000 ))
    until [ "$(curl -sf -m 5 "$(url 1 /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = 3 ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "nodes never all up" >&2; tail -20 "${LOGS[1]}" >&2; exit 1; }
        sleep 0.2
    done
}
# shellcheck disable=SC2120  # SECONDS is optional
start_cluster() {
    local id
    for id in 1 2 3; do start_node "$id" --initial-cluster "$CLUSTER"; done
    wait_cluster "$@"
}

create_topic() {
    curl -sS --fail-with-body -m 120 -XPOST "$(url "$1" /v1/topics)" -H 'content-type: application/json' \
        -d "{\"name\":\"$2\",\"partitions\":$3,\"replication_factor\":$4}" >/dev/null
}
# topics_json NODE TOPIC...: GET /v1/topics/TOPIC of each TOPIC on node NODE, as one JSON list.
topics_json() {
    local node=$1 topic sep=
    shift
    printf '['
    for topic in "$@"; do
        printf '%s' "$sep"
        curl -sf -m 5 "$(url "$node" "/v1/topics/$topic")" || return
        sep=,
    done
    printf ']\n'
}
wait_topics() {
    local seconds=$1 node=$2 cond=$3 deadline
    shift 3
    deadline=$(( $(now_ms) + seconds * 1000 ))
    until [ "$(topics_json "$node" "$@" | json "all($cond for t in d for p in t['partitions'])" 2>/dev/null)" = True ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "topics $* never settled ($cond):" >&2; topics_json "$node" "$@" >&2 || echo >&2; exit 1; }
        sleep 0.2
    done
}

bench_produce() {
    local node=$1
    shift
    timeout "$BENCH_TIMEOUT_S" "$HERALD" bench produce --server "$(url "$node" "")" "$@" --json 2>>"$DIR/bench.log" ||
        { echo "herald bench failed or passed ${BENCH_TIMEOUT_S} s:" >&2; tail -5 "$DIR/bench.log" >&2; exit 1; }
}

# CPU ticks (USER_HZ) the whole machine spent busy, our running nodes spent, and this shell's
# finished children (the load generator, curl, python) spent. What is left is CPU spent outside
# them: other processes (a build running alongside makes a contended measurement), and the
# kernel's own work for ours (loopback softirqs, page-cache writeback): a few % under load.
HZ=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
node_ticks() {
    local pid sum=0
    for pid in "${PIDS[@]}"; do sum=$(( sum + $(proc_ticks "$pid" 2>/dev/null || echo 0) )); done
    echo "$sum"
}
child_ticks() {
    times >"$DIR/times"   # no pipe: a subshell would report its own (empty) children
    tail -1 "$DIR/times" | awk -v hz="$HZ" '{t = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); t += a[1] * 60 + a[2]} printf "%.0f", t * hz}'
}
# foreign_pct BUSY0 NODES0 CHILDREN0 START_MS: the share of the machine spent outside them since.
foreign_pct() {
    awk -v t="$(( $(busy_ticks) - $1 - ($(node_ticks) - $2) - ($(child_ticks) - $3) ))" \
        -v hz="$HZ" -v ms="$(( $(now_ms) - $4 ))" -v cores="$(nproc)" \
        'BEGIN {v = 100 * t / hz / (ms / 1000) / cores; printf "%.0f", v < 0 ? 0 : v}'
}

# log_after LOG LINES: LOG after its first LINES lines, without colour codes.
log_after() { tail -n +"$(( $2 + 1 ))" "$1" | sed 's/\x1b\[[0-9;]*m//g'; }
# top_warnings N LOG: the N most frequent WARN/ERROR lines of LOG, counted, without their
# timestamps, long ones shortened in the middle.
top_warnings() {
    { grep ' WARN\| ERROR' "$2" | cut -c29- | sed -E 's/^(.{90}).{20,}(.{90})$/\1 ... \2/' |
        sort | uniq -c | sort -rn | head -"$1"; } || true
}
