#!/usr/bin/env bash
# What validating produced messages against a schema costs (docs/schemas.md, "Validation at
# produce"): one node, an Avro subject of ~1 KB records (15 fields: strings, longs, doubles, an
# array, a nested record, a union with null), and two topics of PARTITIONS partitions, one whose
# config names the subject (every record is validated) and one that does not. The same
# wire-format records (made with `herald produce --schema` and read back) are produced to both,
# BATCH_SIZE per request, A B A B over RUNS pairs; prints msgs/s of each run, the medians and the
# validated/unvalidated ratio (the issue's aim: at least 0.8).
#
# Then decode-to-JSON reads (`?decode=json`) against raw reads of the same messages, and
# registry lookups per second (`GET /schema-registry/schemas/ids/{id}`).
#
#   benches/schema-validation.sh
#   RUNS=3 MESSAGES=100000 benches/schema-validation.sh
set -euo pipefail

RUNS=${RUNS:-5}
MESSAGES=${MESSAGES:-200000}
BATCH_SIZE=${BATCH_SIZE:-1000}
PARTITIONS=${PARTITIONS:-4}
CONNECTIONS=${CONNECTIONS:-4}
BENCH_TIMEOUT_S=${BENCH_TIMEOUT_S:-600}
BASE_HTTP=${BASE_HTTP:-19780}
BASE_RAFT=${BASE_RAFT:-19770}
EXTRA_ARGS=""
KEEP_LOGS=${KEEP_LOGS:-}
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" schema-validation

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
start_node 0
wait_ready 0
server=$(url 0 "")

cat >"$DIR/order.avsc" <<'EOF'
{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "id", "type": "long"},
  {"name": "customer", "type": "string"},
  {"name": "email", "type": "string"},
  {"name": "street", "type": "string"},
  {"name": "city", "type": "string"},
  {"name": "country", "type": "string"},
  {"name": "amount", "type": "double"},
  {"name": "tax", "type": "double"},
  {"name": "created_at", "type": "long"},
  {"name": "updated_at", "type": "long"},
  {"name": "note", "type": ["null", "string"], "default": null},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
     {"name": "sku", "type": "string"}, {"name": "quantity", "type": "int"}, {"name": "price", "type": "double"}]}}},
  {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
  {"name": "comment", "type": "string"}
]}
EOF
"$HERALD" schemas register orders-value --file "$DIR/order.avsc" --server "$server" >"$DIR/registered.json"
echo "registered: $(cat "$DIR/registered.json")"
create_topic 0 scratch 1 1
for topic in plain validated; do create_topic 0 "$topic" "$PARTITIONS" 1; done
curl -sS --fail-with-body -m 30 -XPATCH "$(url 0 /v1/topics/validated)" -H 'content-type: application/json' \
    -d '{"config": {"value_subject": "orders-value"}}' >/dev/null

# 64 distinct records of about 1 KB, encoded by `herald produce --schema`, read back as base64.
python3 - >"$DIR/orders.jsonl" <<'EOF'
import json
for n in range(64):
    print(json.dumps({
        "id": n, "customer": f"customer-{n:04d}" * 4, "email": f"c{n}@example.com",
        "street": "Main Street " + "x" * 80, "city": "Springfield" * 3, "country": "Utopia",
        "amount": n * 3.25, "tax": n * 0.5, "created_at": 1764400000000 + n, "updated_at": 1764400000500 + n,
        "note": None if n % 2 else "leave at the door " * 4, "tags": [f"tag{t}" for t in range(8)],
        "items": [{"sku": f"SKU-{n}-{i}-" + "y" * 30, "quantity": i, "price": i * 1.5} for i in range(6)],
        "status": ["NEW", "PAID", "SHIPPED"][n % 3], "comment": "z" * 200,
    }))
EOF
"$HERALD" produce scratch --schema orders-value --server "$server" <"$DIR/orders.jsonl" 2>/dev/null
curl -sf -m 30 "$(url 0 '/v1/topics/scratch/partitions/0/messages?max_messages=64')" |
    json "'\n'.join(m['value_b64'] for m in d['messages'])" >"$DIR/values.b64"
size=$(python3 -c "import base64; v=open('$DIR/values.b64').read().split(); print(sum(len(base64.b64decode(l)) for l in v) // len(v))")
echo "records: 64 distinct, ${size} bytes each on average (wire format)"

run_once() {
    bench_produce 0 --topic "$1" --values-file "$DIR/values.b64" --batch-size "$BATCH_SIZE" \
        --connections "$CONNECTIONS" --messages "$MESSAGES" --acks all |
        json "f\"{d['messages_per_sec']:.0f} {d['errors']}\""
}
plain=() validated=()
one_run() {
    local topic=$1 rate errors
    read -r rate errors < <(run_once "$topic")
    [ "$errors" = 0 ] || { echo "$topic run $run: $errors errors" >&2; exit 1; }
    if [ "$topic" = plain ]; then plain+=("$rate"); else validated+=("$rate"); fi
}
for run in $(seq 1 "$RUNS"); do
    # A B, then B A: whichever runs second meets the first one's flushes and compactions.
    if [ $(( run % 2 )) = 1 ]; then one_run plain; one_run validated; else one_run validated; one_run plain; fi
    echo "run $run: unvalidated ${plain[-1]} msg/s, validated ${validated[-1]} msg/s"
done
plain_median=$(echo "${plain[@]}" | median)
validated_median=$(echo "${validated[@]}" | median)
ratio=$(python3 -c "print(round($validated_median / $plain_median, 3))")
echo "median: unvalidated ${plain_median} msg/s, validated ${validated_median} msg/s, ratio ${ratio}"

# Reads of the same 1000 messages, raw and decoded to JSON (time per read, median of 20).
read_ms() {
    local query=$1 times=() started
    for _ in $(seq 1 20); do
        started=$(now_ms)
        curl -sf -m 30 -o /dev/null "$(url 0 "/v1/topics/validated/partitions/0/messages?max_messages=1000$query")"
        times+=($(( $(now_ms) - started )))
    done
    echo "${times[@]}" | median
}
raw=$(read_ms "")
decoded=$(read_ms "&decode=json")
echo "read 1000 messages: raw ${raw} ms, decoded ${decoded} ms (median of 20)"

# Registry lookups by id: LOOKUPS requests over one kept-alive connection (one curl process,
# the URL repeated), so the figure is the server's and one client's round trips, not process
# starts; and the subject's latest version the same way.
LOOKUPS=${LOOKUPS:-5000}
id=$(json "d['id']" <"$DIR/registered.json")
lookups() {
    local path=$1 urls=() started elapsed
    for _ in $(seq 1 "$LOOKUPS"); do urls+=("$(url 0 "$path")"); done
    started=$(now_ms)
    curl -sf -m 300 "${urls[@]}" >/dev/null
    elapsed=$(( $(now_ms) - started ))
    echo "$(( LOOKUPS * 1000 / (elapsed > 0 ? elapsed : 1) ))"
}
echo "registry lookups: $(lookups "/schema-registry/schemas/ids/$id")/s by id, $(lookups /schema-registry/subjects/orders-value/versions/latest)/s of the latest version ($LOOKUPS sequential requests on one connection)"
