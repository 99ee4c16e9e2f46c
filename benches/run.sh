#!/usr/bin/env bash
# Runs issue 2's benchmark scenarios against a fresh release node and prints the median of
# RUNS runs of each, with ratios against a baseline measured in the same run.
#
#   benches/run.sh            # 3 runs of every scenario
#   RUNS=5 benches/run.sh
#
# The node and the load generator share this machine; figures are medians because it is noisy.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
PORT=${PORT:-18080}
TARGET=${CARGO_TARGET_DIR:-/var/tmp/herald-target}
HERALD="$TARGET/release/herald"
DATA=$(mktemp -d /tmp/herald-bench.XXXXXX)
SERVER="http://127.0.0.1:$PORT"

cargo build --release --bin herald >&2
"$HERALD" serve --data-dir "$DATA" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$((PORT + 1))" \
    >"$DATA/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 1 100); do
    curl -sf "$SERVER/readyz" >/dev/null && break
    sleep 0.1
done

# run NAME ARGS...: RUNS runs of one `herald bench` command, one JSON line per run.
run() {
    local name=$1
    shift
    for run in $(seq 1 "$RUNS"); do
        printf '%s\t' "$name"
        "$HERALD" bench "$@" --server "$SERVER" --json
    done
}

{
    run produce-100B-acks-none produce --topic p100n --message-size 100 --batch-size 1000 --connections 8 --messages 1000000 --acks none
    run produce-100B produce --topic p100 --message-size 100 --batch-size 1000 --connections 8 --messages 1000000
    run consume-100B consume --topic p100 --max-messages 1000 --messages 1000000
    run produce-1KB produce --topic p1k --message-size 1000 --batch-size 1000 --connections 8 --messages 300000
    run single-100B produce --topic single --message-size 100 --raw --connections 64 --messages 100000
} >"$DATA/results.tsv"

# p99 at a tenth of the peak request rate of 100-byte batches.
peak=$(python3 - "$DATA/results.tsv" <<'PY'
import json, statistics, sys
rows = [line.split("\t", 1) for line in open(sys.argv[1])]
rates = [json.loads(r[1])["requests_per_sec"] for r in rows if r[0] == "produce-100B"]
print(max(1, int(statistics.median(rates) / 10)))
PY
)
run produce-100B-tenth-of-peak produce --topic p100t --message-size 100 --batch-size 1000 --connections 8 \
    --messages $((peak * 1000 * 10)) --rate "$peak" >>"$DATA/results.tsv"

python3 - "$DATA/results.tsv" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, text = line.split("\t", 1)
    rows.setdefault(name, []).append(json.loads(text))
def med(name, key):
    if key.startswith("latency_"):
        return statistics.median(r["latency_ms"][key[len("latency_"):-3]] for r in rows[name])
    return statistics.median(r[key] for r in rows[name])
print(f"{'scenario':28} {'runs':>4} {'msgs/s':>12} {'MB/s':>8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9}")
for name in rows:
    print(f"{name:28} {len(rows[name]):>4} {med(name,'messages_per_sec'):>12.0f} {med(name,'mb_per_sec'):>8.1f} "
          f"{med(name,'requests_per_sec'):>9.0f} {med(name,'latency_p50_ms'):>8.2f} {med(name,'latency_p99_ms'):>8.2f} "
          f"{med(name,'latency_p999_ms'):>9.2f}")
base = med("produce-100B-acks-none", "messages_per_sec")
print(f"\nacks=all / acks=none (same run, 100 B): {med('produce-100B','messages_per_sec') / base:.2f}")
print(f"consume / produce (100 B): {med('consume-100B','messages_per_sec') / med('produce-100B','messages_per_sec'):.2f}")
PY
grep -E "herald_storage_fsync_batch_writes_(sum|count)" <(curl -s "$SERVER/metrics") || true
