# shellcheck shell=bash
# Helpers for the benchmark scripts in benches/: functions only, no settings and no side effects.
# Source it with `. "$(dirname "$0")/lib/common.sh"` (lib/cluster.sh sources it itself). Provides:
#   now_ms     milliseconds since the epoch
#   json EXPR  prints the Python expression EXPR over `d`, the JSON document read from stdin
#   median     the median of the numbers read from stdin (one a line or separated by spaces)
#   wait_for_ports PORT...  waits (60 s at most) until the nodes on 127.0.0.1:PORT answer /readyz;
#              on failure prints the tail of "$DIR"/*.log (the caller's node logs) and exits
#   bench_workdir NAME  makes DIR (a fresh /var/tmp/herald-NAME.XXXXXX) and PIDS (the processes
#              the script starts), and on exit kills every pid in PIDS and removes DIR; exports
#              HERALD_CLUSTER_SECRET (bench_cluster_secret)
#   bench_cluster_secret  exports HERALD_CLUSTER_SECRET (unless set): the secret every node of a
#              multi-node cluster needs, the same on all
#   stop_nodes kills every pid in PIDS now and empties it (between phases of one script)

now_ms() { date +%s%3N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
wait_for_ports() {
    local deadline=$(( $(now_ms) + 60000 ))
    for port in "$@"; do
        until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
            [ "$(now_ms)" -lt "$deadline" ] || { echo "node on $port did not start" >&2; tail "$DIR"/*.log >&2; exit 1; }
            sleep 0.1
        done
    done
}

bench_cluster_secret() {
    export HERALD_CLUSTER_SECRET="${HERALD_CLUSTER_SECRET:-herald-bench-cluster-secret-of-every-node}"
}
bench_workdir() {
    bench_cluster_secret
    DIR=$(mktemp -d "/var/tmp/herald-$1.XXXXXX")
    PIDS=()
    trap bench_cleanup EXIT
}
bench_cleanup() {
    stop_nodes
    rm -rf "$DIR"
}
stop_nodes() {
    local pid
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
}
