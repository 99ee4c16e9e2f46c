#!/usr/bin/env bash
# Writes the fixtures of on-disk format 11 (migrations/README.md): a one-node and a three-node
# cluster holding every kind of state a node keeps, made through the HTTP API by the release
# that writes format 11, stopped gracefully, and archived with what a test must read back.
#
#   HERALD=/path/to/herald migrations/11/generate.sh        # both fixtures
#   FIXTURES=one-node migrations/11/generate.sh             # one of them
#
# HERALD defaults to ${CARGO_TARGET_DIR:-target}/debug/herald (relative to the repository).
# Build it from the commit that wrote format 11 (manifest.json names the one used last); the
# manifest records `herald --version` and HERALD_COMMIT (default: the repository's HEAD, with
# `-dirty` when src/ or crates/ have uncommitted changes).
#
# Everything runs on loopback: the one-node fixture on 127.61.31.1, the three-node one on
# 127.61.32.1-3 with raft on port 17101 (the raft addresses are stored in the cluster's
# metadata, so the test starts the nodes on the same ones). Every wait has a deadline.
set -euo pipefail
export LC_ALL=C

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/../.." && pwd)
# A later format that stores the same kinds of state runs this script for its own fixtures
# (its generate.sh sets both): which format, and the folder the fixtures go to.
FORMAT=${FIXTURE_FORMAT:-11}
HERE=${FIXTURE_DIR:-$SCRIPT_DIR}
HERALD=${HERALD:-${CARGO_TARGET_DIR:-target}/debug/herald}
case $HERALD in /*) ;; *) HERALD=$REPO/$HERALD ;; esac
FIXTURES=${FIXTURES:-one-node three-node}

# The cluster secret of both fixtures: the signing keys in them are sealed under it.
CLUSTER_SECRET=herald-format-$FORMAT-fixture-cluster-secret-not-for-production
# Far ahead: the longest a message can wait for its delivery (9999-12-31T23:59:59Z).
DELIVER_AT_FOREVER=253402300799000
# The longest ack deadline and nack delay a subscription allows.
MAX_ACK_DEADLINE_MS=600000
MAX_NACK_DELAY_MS=86400000
# An idempotency window no test run outlives (100 years), so a re-send is always a duplicate.
FOREVER_WINDOW_MS=3155760000000
START_DEADLINE=60
STOP_DEADLINE=60
STATE_DEADLINE=60

[[ -x $HERALD ]] || { echo "generate.sh: no herald binary at $HERALD (set HERALD=...)" >&2; exit 1; }
command -v curl >/dev/null || { echo "generate.sh: curl is needed" >&2; exit 1; }
if command -v jq >/dev/null; then
    JSON_TOOL=jq
elif command -v python3 >/dev/null; then
    JSON_TOOL=python3
else
    echo "generate.sh: jq or python3 is needed" >&2
    exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/herald-format-$FORMAT-fixture.XXXXXX")
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ ${KEEP_WORK:-} == 1 ]]; then
        echo "generate.sh: the nodes' logs and data are kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

log() { printf '%s generate.sh: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "FAILED: $*"
    KEEP_WORK=1
    local node_log
    for node_log in "$WORK"/*/node-*.log; do
        [[ -e $node_log ]] || continue
        echo "---- tail of $node_log ----" >&2
        tail -n 30 "$node_log" >&2
    done
    exit 1
}
now_ms() { date +%s%3N; }

# --- JSON -----------------------------------------------------------------------------------

# jget FILE PATH: the value at a dotted PATH (`messages.0.ack_id`) of the JSON in FILE: a
# string as is, anything else as compact JSON (`null` when absent).
jget() {
    if [[ $JSON_TOOL == jq ]]; then
        jq -r --arg p "$2" \
            'getpath($p | split(".") | map(tonumber? // .)) | if type == "string" then . else tojson end' "$1"
    else
        python3 - "$1" "$2" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))
for part in sys.argv[2].split("."):
    if isinstance(value, list):
        value = value[int(part)] if int(part) < len(value) else None
    elif isinstance(value, dict):
        value = value.get(part)
    else:
        value = None
print(value if isinstance(value, str) else json.dumps(value, separators=(",", ":")))
PY
    fi
}

# jlen FILE PATH: the length of the array at PATH (0 when absent).
jlen() {
    local value
    value=$(jget "$1" "$2")
    if [[ $value == null ]]; then
        echo 0
    elif [[ $JSON_TOOL == jq ]]; then
        jq 'length' <<<"$value"
    else
        python3 -c 'import json, sys; print(len(json.loads(sys.argv[1])))' "$value"
    fi
}

# pretty FILE: FILE's JSON, indented, keys sorted (numbers kept exactly as written).
pretty() {
    if command -v python3 >/dev/null; then
        python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])), indent=1, sort_keys=True))' "$1"
    else
        jq -S --indent 1 . "$1"
    fi
}

# dir_to_json DIR: one JSON object of DIR's entries: `NAME.json` gives key NAME with the file's
# JSON, a directory NAME an object made the same way.
dir_to_json() {
    local entry name first=1
    printf '{'
    for entry in "$1"/*; do
        [[ -e $entry ]] || continue
        name=$(basename "$entry")
        name=${name%.json}
        [[ $first == 1 ]] || printf ','
        first=0
        printf '"%s":' "$name"
        if [[ -d $entry ]]; then dir_to_json "$entry"; else cat "$entry"; fi
    done
    printf '}'
}

# --- HTTP -----------------------------------------------------------------------------------

ANSWER=$WORK/answer.json
# call METHOD URL TOKEN [BODY [CONTENT-TYPE [HEADER]]]: prints the status; the body is in $ANSWER.
call() {
    local method=$1 url=$2 token=$3 body=${4-} type=${5:-application/json} header=${6-}
    local args=(-sS --noproxy '*' --max-time 30 -o "$ANSWER" -w '%{http_code}' -X "$method")
    [[ -n $token ]] && args+=(-H "authorization: Bearer $token")
    [[ -n $header ]] && args+=(-H "$header")
    [[ -n $body ]] && args+=(-H "content-type: $type" --data-binary "$body")
    rm -f "$ANSWER"
    # On a transport error curl writes 000 as the status.
    curl "${args[@]}" "$url" || true
}

# expect STATUS METHOD URL TOKEN [BODY...]: the call must answer STATUS.
expect() {
    local want=$1 got
    shift
    got=$(call "$@")
    [[ $got == "$want" ]] || die "$1 $2 answered $got, not $want: $(cat "$ANSWER" 2>/dev/null)"
}

# save NAME: keeps the last answer as $STATE/NAME.json (NAME may contain slashes).
save() {
    mkdir -p "$(dirname "$STATE/$1.json")"
    cp "$ANSWER" "$STATE/$1.json"
}

# record NAME JSON: writes JSON as $STATE/NAME.json.
record() {
    mkdir -p "$(dirname "$STATE/$1.json")"
    printf '%s' "$2" >"$STATE/$1.json"
}

# wait_until WHAT SECONDS COMMAND...: runs COMMAND until it succeeds, at most SECONDS.
wait_until() {
    local what=$1 seconds=$2 deadline
    shift 2
    deadline=$((SECONDS + seconds))
    until "$@"; do
        ((SECONDS < deadline)) || die "$what: not within ${seconds}s"
        sleep 0.2
    done
}

token_for() { # token_for CLIENT_ID SECRET
    local status
    status=$(curl -sS --noproxy '*' --max-time 30 -o "$ANSWER" -w '%{http_code}' -u "$1:$2" \
        -d grant_type=client_credentials "$N1/oauth/token") || status=000
    [[ $status == 200 ]] || die "token for $1: $status $(cat "$ANSWER")"
    jget "$ANSWER" access_token
}

# --- nodes ----------------------------------------------------------------------------------

declare -A NODE_PID NODE_HTTP NODE_RAFT NODE_DATA NODE_LOG

start_node() { # start_node ID HTTP_ADDR RAFT_ADDR CONFIG
    local id=$1
    NODE_HTTP[$id]=$2
    NODE_RAFT[$id]=$3
    NODE_DATA[$id]=$WORK/$FIXTURE/node-$id/data
    NODE_LOG[$id]=$WORK/$FIXTURE/node-$id.log
    mkdir -p "$WORK/$FIXTURE/node-$id"
    HERALD_CLUSTER_SECRET=$CLUSTER_SECRET HERALD_LOG_FORMAT=text NO_COLOR=1 \
        "$HERALD" serve --config "$4" --node-id "$id" --data-dir "${NODE_DATA[$id]}" \
        --http-addr "$2" --raft-addr "$3" >"${NODE_LOG[$id]}" 2>&1 &
    NODE_PID[$id]=$!
    PIDS+=("$!")
}

node_ready() { # node_ready ID
    kill -0 "${NODE_PID[$1]}" 2>/dev/null || die "node $1 exited"
    [[ $(curl -s --noproxy '*' --max-time 2 -o /dev/null -w '%{http_code}' "http://${NODE_HTTP[$1]}/readyz") == 200 ]]
}

stop_nodes() { # stop_nodes ID...: SIGTERM to all, then each must exit 0 within the deadline
    local id deadline status
    for id in "$@"; do kill -TERM "${NODE_PID[$id]}"; done
    deadline=$((SECONDS + STOP_DEADLINE))
    for id in "$@"; do
        while kill -0 "${NODE_PID[$id]}" 2>/dev/null; do
            ((SECONDS < deadline)) || die "node $id did not exit within ${STOP_DEADLINE}s of SIGTERM"
            sleep 0.2
        done
        status=0
        wait "${NODE_PID[$id]}" || status=$?
        [[ $status == 0 ]] || die "node $id exited with $status after SIGTERM"
        grep -q 'storage flushed' "${NODE_LOG[$id]}" || die "node $id did not flush its storage"
    done
}

archive() { # archive DATA_DIR OUT.tar.gz: without RocksDB's info logs and lock file
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
        --exclude=LOG --exclude='LOG.old.*' --exclude=LOCK -C "$1" -cf - . | gzip -n -9 >"$2"
}

# --- the state ------------------------------------------------------------------------------

# Messages of a partition, all of them (the fixtures are small).
save_partition() { # save_partition TOPIC PARTITION
    expect 200 GET "$N1/v1/topics/$1/partitions/$2/messages?offset=earliest&max_messages=1000" "$ADMIN"
    save "topics/$1/partitions/$2"
}

create_topic() { # create_topic NAME PARTITIONS CONFIG_JSON
    expect 201 POST "$N1/v1/topics" "$ADMIN" \
        "{\"name\":\"$1\",\"partitions\":$2,\"replication_factor\":$RF,\"config\":$3}"
}

partition_count() { jlen "$STATE/topics/$1/described.json" partitions; }

all_in_sync() { # all_in_sync TOPIC: every partition has RF in-sync replicas and a leader
    call GET "$N1/v1/topics/$1" "$ADMIN" >/dev/null
    local count i
    count=$(jlen "$ANSWER" partitions)
    for ((i = 0; i < count; i++)); do
        [[ $(jlen "$ANSWER" "partitions.$i.in_sync") == "$RF" ]] || return 1
        [[ $(jget "$ANSWER" "partitions.$i.leader") != null ]] || return 1
    done
}

log_start_moved() { # the size retention of metrics-trimmed ran, and nothing is left to trim
    call GET "$N1/v1/topics/metrics-trimmed" "$ADMIN" >/dev/null
    local start
    start=$(jget "$ANSWER" partitions.0.log_start_offset)
    if [[ $start != 0 && $start == "${LAST_LOG_START:-}" ]]; then return 0; fi
    LAST_LOG_START=$start
    sleep 1.5 # two retention checks: a second trim would move it again
    return 1
}

compacted_once() { # the first pass of profiles ran: round 1 is gone
    call GET "$N1/v1/topics/profiles/partitions/0/messages?offset=earliest&max_messages=1000" "$ADMIN" >/dev/null
    local first
    first=$(jget "$ANSWER" messages.0.offset)
    [[ $first =~ ^[0-9]+$ ]] && ((first >= 4))
}

audit_settled() { # the audit log holds the denied requests and stopped growing
    call GET "$N1/v1/audit?since=0&limit=1000" "$ADMIN" >/dev/null
    local count
    count=$(jlen "$ANSWER" events)
    grep -q '"status":403' "$ANSWER" || return 1
    grep -q '"status":401' "$ANSWER" || return 1
    grep -q '"action":"start redrive"' "$ANSWER" || return 1
    if [[ $count == "${LAST_AUDIT_COUNT:-}" ]]; then return 0; fi
    LAST_AUDIT_COUNT=$count
    sleep 1
    return 1
}

dlq_holds() { # dlq_holds N: jobs-dlq has N messages
    call GET "$N1/v1/topics/jobs-dlq" "$ADMIN" >/dev/null
    [[ $(jget "$ANSWER" partitions.0.high_watermark) == "$1" ]]
}

redrive_done() {
    call GET "$N1/v1/subscriptions/jobs-workers/redrive" "$ADMIN" >/dev/null
    [[ $(jget "$ANSWER" state) == done ]]
}

# pull: one pull of jobs-workers through N3 (up to 10 messages, waiting up to 2 s).
pull() {
    expect 200 POST "$N3/v1/subscriptions/jobs-workers/pull" "$CONSUMER" '{"max_messages":10,"max_wait_ms":2000}'
}

ack_id_of() { # ack_id_of OFFSET FILE: the ack id of the pulled message at OFFSET
    local count i
    count=$(jlen "$2" messages)
    for ((i = 0; i < count; i++)); do
        if [[ $(jget "$2" "messages.$i.message.offset") == "$1" ]]; then
            jget "$2" "messages.$i.ack_id"
            return
        fi
    done
    die "offset $1 was not pulled: $(cat "$2")"
}

build_state() {
    log "clients, keys and the policy"
    local admin_secret
    admin_secret=$(sed -n 's/^client_secret=//p' "${NODE_DATA[1]}/admin-credentials")
    [[ -n $admin_secret ]] || die "no admin-credentials in node 1's data directory"
    ADMIN=$(token_for admin "$admin_secret")
    record clients/admin "{\"client_id\":\"admin\",\"roles\":[\"admin\"],\"client_secret\":\"$admin_secret\"}"
    local client role
    for client in fixture-producer:producer fixture-consumer:consumer \
        fixture-orders-writer:orders-writer fixture-viewer:viewer; do
        role=${client#*:}
        client=${client%%:*}
        expect 201 POST "$N1/v1/auth/clients" "$ADMIN" "{\"client_id\":\"$client\",\"roles\":[\"$role\"]}"
        save "clients/$client"
    done
    PRODUCER=$(token_for fixture-producer "$(jget "$STATE/clients/fixture-producer.json" client_secret)")
    CONSUMER=$(token_for fixture-consumer "$(jget "$STATE/clients/fixture-consumer.json" client_secret)")
    WRITER=$(token_for fixture-orders-writer "$(jget "$STATE/clients/fixture-orders-writer.json" client_secret)")
    # The built-in rules, and a custom role that may produce to orders and nothing else.
    expect 200 PUT "$N2/v1/auth/policies" "$ADMIN" '{"rules":[
        {"role":"admin","resource":"*","action":"*"},
        {"role":"consumer","resource":"cluster:replies","action":"produce"},
        {"role":"consumer","resource":"group:*","action":"consume"},
        {"role":"consumer","resource":"group:*","action":"view"},
        {"role":"consumer","resource":"subscription:*","action":"consume"},
        {"role":"consumer","resource":"subscription:*","action":"view"},
        {"role":"consumer","resource":"topic:*","action":"consume"},
        {"role":"consumer","resource":"topic:*","action":"view"},
        {"role":"producer","resource":"cluster:producers","action":"produce"},
        {"role":"producer","resource":"producer:*","action":"produce"},
        {"role":"producer","resource":"topic:*","action":"produce"},
        {"role":"producer","resource":"topic:*","action":"view"},
        {"role":"viewer","resource":"cluster:*","action":"view"},
        {"role":"viewer","resource":"group:*","action":"view"},
        {"role":"viewer","resource":"subscription:*","action":"view"},
        {"role":"viewer","resource":"topic:*","action":"view"},
        {"role":"orders-writer","resource":"topic:orders","action":"produce"},
        {"role":"orders-writer","resource":"topic:orders","action":"view"}]}'

    log "topics"
    create_topic orders 3 '{"retention_ms":-1}'
    create_topic telemetry-zstd 1 '{"retention_ms":-1,"compression":"zstd"}'
    create_topic telemetry-lz4 1 '{"retention_ms":-1,"compression":"lz4"}'
    create_topic profiles 1 '{"retention_ms":-1,"cleanup_policy":"compact","min_compaction_lag_ms":5000}'
    create_topic metrics-trimmed 1 '{"retention_ms":-1,"retention_bytes":1000}'
    create_topic payments 2 "{\"retention_ms\":-1,\"idempotency_window_ms\":$FOREVER_WINDOW_MS}"
    create_topic jobs 1 '{"retention_ms":-1}'
    create_topic jobs-dlq 1 '{"retention_ms":-1}'
    local topic
    for topic in orders telemetry-zstd telemetry-lz4 profiles metrics-trimmed payments jobs jobs-dlq; do
        wait_until "$topic in sync" "$STATE_DEADLINE" all_in_sync "$topic"
    done

    log "plain partitions"
    expect 200 POST "$N2/v1/topics/orders/messages" "$PRODUCER" '{"messages":[
        {"partition":0,"key":"user-1","value":{"item":"book","qty":1},"headers":{"trace":"t-1"},"timestamp":1764400000000},
        {"partition":0,"value_b64":"AAEC/w==","timestamp":1764400000001},
        {"partition":1,"key":"user-2","value":"plain text","headers":{"trace":"t-2","tenant":"eu"},"timestamp":1764400000002},
        {"partition":2,"key_b64":"AP8B","value":[1,2,3],"timestamp":1764400000003}]}'
    expect 200 POST "$N3/v1/topics/orders/messages" "$PRODUCER" \
        '{"messages":[{"key":"user-42","value":{"item":"pen","qty":3}},{"key":"user-7","value":12.5}]}'
    expect 200 POST "$N1/v1/topics/orders/messages?key=user-9&partition=1" "$PRODUCER" \
        'any bytes at all' application/octet-stream
    expect 200 POST "$N2/v1/topics/orders/messages" "$PRODUCER" \
        '{"messages":[{"value":"unkeyed 1"},{"value":"unkeyed 2","headers":{"empty":""}}]}'
    expect 200 POST "$N1/v1/topics/orders/messages" "$WRITER" \
        '{"messages":[{"partition":2,"value":{"by":"orders-writer"},"headers":{"source":"policy"},"timestamp":1764400000010}]}'
    local pad
    pad=$(printf 'compressible %.0s' {1..20})
    for topic in telemetry-zstd telemetry-lz4; do
        expect 200 POST "$N2/v1/topics/$topic/messages" "$PRODUCER" "{\"messages\":[
            {\"key\":\"host-1\",\"value\":{\"cpu\":0.5,\"note\":\"$pad\"},\"timestamp\":1764400001000},
            {\"key\":\"host-1\",\"value\":{\"cpu\":0.25,\"note\":\"$pad\"},\"timestamp\":1764400001001},
            {\"value_b64\":\"$(printf '%s' "$pad" | base64 -w0)\",\"timestamp\":1764400001002}]}"
    done

    log "a partition trimmed by size"
    local i
    for ((i = 0; i < 8; i++)); do
        expect 200 POST "$N3/v1/topics/metrics-trimmed/messages" "$PRODUCER" \
            "{\"messages\":[{\"key\":\"m-$i\",\"value\":{\"sample\":$i,\"pad\":\"$pad\"},\"timestamp\":$((1764400002000 + i))}]}"
    done
    wait_until "size retention of metrics-trimmed" "$STATE_DEADLINE" log_start_moved

    log "a compacted partition, cleaned once"
    expect 200 POST "$N1/v1/topics/profiles/messages" "$PRODUCER" '{"messages":[
        {"key":"a","value":{"name":"a","v":1}},{"key":"b","value":{"name":"b","v":1}},
        {"key":"c","value":{"name":"c","v":1}},{"key":"d","value":{"name":"d","v":1}}]}'
    expect 200 POST "$N2/v1/topics/profiles/messages" "$PRODUCER" '{"messages":[
        {"key":"a","value":{"name":"a","v":2}},{"key":"b","value":{"name":"b","v":2}},
        {"key":"c","value":{"name":"c","v":2}},{"key":"d","value":{"name":"d","v":2}}]}'
    # The newest batch is never cleaned: one more puts round 2 in reach of a pass.
    expect 200 POST "$N3/v1/topics/profiles/messages" "$PRODUCER" '{"messages":[{"key":"filler","value":"after round 2"}]}'
    wait_until "a compaction pass of profiles" "$STATE_DEADLINE" compacted_once

    log "idempotent producing"
    expect 200 POST "$N2/v1/producers" "$PRODUCER" '{"name":"fixture-etl"}'
    expect 200 POST "$N3/v1/producers" "$PRODUCER" '{"name":"fixture-etl"}'
    save producer/registered
    local pid epoch body
    pid=$(jget "$ANSWER" producer_id)
    epoch=$(jget "$ANSWER" producer_epoch)
    [[ $epoch == 1 ]] || die "the second registration of fixture-etl got epoch $epoch"
    body="{\"producer_id\":$pid,\"producer_epoch\":1,\"sequence\":0,\"messages\":[
        {\"partition\":0,\"key\":\"pay-1\",\"value\":{\"amount\":10},\"timestamp\":1764400003000},
        {\"partition\":0,\"key\":\"pay-2\",\"value\":{\"amount\":20},\"timestamp\":1764400003001}]}"
    expect 200 POST "$N1/v1/topics/payments/messages" "$PRODUCER" "$body"
    body="{\"producer_id\":$pid,\"producer_epoch\":1,\"sequence\":0,\"messages\":[
        {\"partition\":1,\"key\":\"pay-4\",\"value\":{\"amount\":40},\"timestamp\":1764400003003}]}"
    expect 200 POST "$N2/v1/topics/payments/messages" "$PRODUCER" "$body"
    body="{\"producer_id\":$pid,\"producer_epoch\":1,\"sequence\":2,\"messages\":[{\"partition\":0,\"key\":\"pay-3\",\"value\":{\"amount\":30},\"timestamp\":1764400003002}]}"
    expect 200 POST "$N3/v1/topics/payments/messages" "$PRODUCER" "$body"
    record producer/last_request "$body"
    save producer/last_answer
    record producer/next_sequence '{"0":3,"1":1}'
    body='{"messages":[{"partition":1,"key":"order-17","value":{"amount":17},"timestamp":1764400003004}]}'
    expect 200 POST "$N1/v1/topics/payments/messages" "$PRODUCER" "$body" application/json \
        'idempotency-key: fixture-order-17'
    record idempotency_key/request "$body"
    record idempotency_key/key '"fixture-order-17"'
    save idempotency_key/answer

    log "subscriptions: leases, delays, dead letters, a redrive"
    expect 200 POST "$N2/v1/topics/jobs/messages" "$PRODUCER" "{\"messages\":[
        {\"key\":\"job-0\",\"value\":{\"job\":0},\"timestamp\":1764400004000},
        {\"key\":\"job-1\",\"value\":{\"job\":1},\"timestamp\":1764400004001},
        {\"key\":\"job-2\",\"value\":{\"job\":2},\"timestamp\":1764400004002},
        {\"key\":\"job-3\",\"value\":{\"job\":3},\"headers\":{\"attempt-note\":\"fails twice\"},\"timestamp\":1764400004003},
        {\"key\":\"job-4\",\"value\":{\"job\":4},\"timestamp\":1764400004004},
        {\"key\":\"job-5\",\"value\":{\"job\":5},\"timestamp\":1764400004005},
        {\"key\":\"job-6\",\"value\":{\"job\":6},\"timestamp\":1764400004006},
        {\"key\":\"job-later\",\"value\":{\"job\":\"later\"},\"deliver_at\":$DELIVER_AT_FOREVER,\"timestamp\":1764400004007}]}"
    expect 201 PUT "$N1/v1/subscriptions/jobs-workers" "$ADMIN" "{\"topic\":\"jobs\",
        \"ack_deadline_ms\":$MAX_ACK_DEADLINE_MS,\"retry_policy\":{\"min_backoff_ms\":0,\"max_backoff_ms\":0},
        \"dead_letter_policy\":{\"topic\":\"jobs-dlq\",\"max_delivery_attempts\":2},\"start\":\"earliest\"}"
    expect 201 PUT "$N1/v1/subscriptions/jobs-keyed" "$ADMIN" \
        '{"topic":"jobs","ack_deadline_ms":30000,"ordering":"key","start":"earliest"}'
    # Lease j0..j6 (job-later waits for its time), all with the longest deadline.
    local leased_from leased_to first
    leased_from=$(now_ms)
    pull
    leased_to=$(now_ms)
    cp "$ANSWER" "$WORK/$FIXTURE/pull1.json"
    [[ $(jlen "$WORK/$FIXTURE/pull1.json" messages) == 7 ]] || die "the first pull leased $(cat "$WORK/$FIXTURE/pull1.json")"
    expect 200 POST "$N3/v1/subscriptions/jobs-workers/ack" "$CONSUMER" \
        "{\"ack_ids\":[\"$(ack_id_of 0 "$WORK/$FIXTURE/pull1.json")\"]}"
    # j1 waits a minute (due whenever the test runs a minute later), j2 the longest delay.
    local offset delay from
    for offset in 1 2; do
        delay=$((offset == 1 ? 60000 : MAX_NACK_DELAY_MS))
        from=$(now_ms)
        expect 200 POST "$N2/v1/subscriptions/jobs-workers/nack" "$CONSUMER" \
            "{\"ack_ids\":[\"$(ack_id_of "$offset" "$WORK/$FIXTURE/pull1.json")\"],\"delay_ms\":$delay}"
        record "nacks/j$offset" "{\"offset\":$offset,\"delivery_attempt\":1,\"nacked_from_ms\":$from,
            \"nacked_to_ms\":$(now_ms),\"delay_ms\":$delay}"
    done
    # j3 fails twice: the second failure sends it to the dead-letter topic.
    expect 200 POST "$N3/v1/subscriptions/jobs-workers/nack" "$CONSUMER" \
        "{\"ack_ids\":[\"$(ack_id_of 3 "$WORK/$FIXTURE/pull1.json")\"]}"
    pull
    [[ $(jget "$ANSWER" messages.0.message.offset) == 3 && $(jget "$ANSWER" messages.0.delivery_attempt) == 2 ]] ||
        die "j3 was not delivered again: $(cat "$ANSWER")"
    first=$(jget "$ANSWER" messages.0.ack_id)
    expect 200 POST "$N3/v1/subscriptions/jobs-workers/nack" "$CONSUMER" "{\"ack_ids\":[\"$first\"]}"
    pull
    [[ $(jlen "$ANSWER" messages) == 0 ]] || die "a pull after the last attempt delivered $(cat "$ANSWER")"
    wait_until "j3 in jobs-dlq" "$STATE_DEADLINE" dlq_holds 1
    # j4 is nacked straight to the dead-letter topic.
    expect 200 POST "$N1/v1/subscriptions/jobs-workers/nack" "$CONSUMER" \
        "{\"ack_ids\":[\"$(ack_id_of 4 "$WORK/$FIXTURE/pull1.json")\"],\"dead_letter\":true}"
    wait_until "j4 in jobs-dlq" "$STATE_DEADLINE" dlq_holds 2
    # j5 keeps its lease of the longest deadline; j6's is cut to the shortest, so it has expired
    # (and is not redelivered yet: nothing pulls any more).
    record leases/j5 "{\"offset\":5,\"ack_id\":\"$(ack_id_of 5 "$WORK/$FIXTURE/pull1.json")\",\"delivery_attempt\":1,
        \"leased_from_ms\":$leased_from,\"leased_to_ms\":$leased_to,\"ack_deadline_ms\":$MAX_ACK_DEADLINE_MS}"
    from=$(now_ms)
    expect 200 POST "$N2/v1/subscriptions/jobs-workers/extend" "$CONSUMER" \
        "{\"ack_ids\":[\"$(ack_id_of 6 "$WORK/$FIXTURE/pull1.json")\"],\"ack_deadline_ms\":100}"
    [[ $(jlen "$ANSWER" extended) == 1 ]] || die "j6's lease was not cut: $(cat "$ANSWER")"
    record leases/j6 "{\"offset\":6,\"ack_id\":\"$(ack_id_of 6 "$WORK/$FIXTURE/pull1.json")\",\"delivery_attempt\":1,
        \"leased_from_ms\":$from,\"leased_to_ms\":$(now_ms),\"ack_deadline_ms\":100}"
    record delayed_for_ever "{\"offset\":7,\"deliver_at\":$DELIVER_AT_FOREVER}"
    # The dead letters go back to jobs (offsets 8 and 9), not delivered yet.
    expect 202 POST "$N2/v1/subscriptions/jobs-workers/redrive" "$ADMIN" '{"max_per_second":100}'
    wait_until "the redrive" "$STATE_DEADLINE" redrive_done
    save subscriptions/jobs-workers/redrive

    log "denied requests, for the audit log"
    expect 403 POST "$N2/v1/topics/jobs/messages" "$WRITER" '{"messages":[{"value":"not allowed"}]}'
    [[ $(curl -sS --noproxy '*' --max-time 30 -o /dev/null -w '%{http_code}' -u fixture-viewer:wrong-secret \
        -d grant_type=client_credentials "$N1/oauth/token") == 401 ]] || die "a wrong secret was not refused"
    wait_until "the audit log" "$STATE_DEADLINE" audit_settled

    log "consumer groups"
    expect 200 POST "$N3/v1/groups/billing/members" "$CONSUMER" '{"topics":["orders"],"session_timeout_ms":10000}'
    local member generation
    member=$(jget "$ANSWER" member_id)
    generation=$(jget "$ANSWER" generation)
    expect 200 POST "$N3/v1/groups/billing/members/$member/poll" "$CONSUMER" '{"max_messages":100,"max_wait_ms":1000}'
    local hw2
    call GET "$N1/v1/topics/orders" "$ADMIN" >/dev/null
    hw2=$(jget "$ANSWER" partitions.2.high_watermark)
    expect 204 POST "$N2/v1/groups/billing/offsets" "$CONSUMER" "{\"member_id\":\"$member\",\"generation\":$generation,
        \"offsets\":[{\"topic\":\"orders\",\"partition\":0,\"offset\":2},{\"topic\":\"orders\",\"partition\":1,\"offset\":1},
        {\"topic\":\"orders\",\"partition\":2,\"offset\":$hw2}]}"
    expect 204 DELETE "$N1/v1/groups/billing/members/$member" "$CONSUMER"

    log "everything as it is now"
    for topic in orders telemetry-zstd telemetry-lz4 metrics-trimmed payments jobs jobs-dlq; do
        wait_until "$topic in sync" "$STATE_DEADLINE" all_in_sync "$topic"
        expect 200 GET "$N1/v1/topics/$topic" "$ADMIN"
        save "topics/$topic/described"
        for ((i = 0; i < $(partition_count "$topic"); i++)); do save_partition "$topic" "$i"; done
    done
    expect 200 GET "$N1/v1/auth/clients" "$ADMIN"
    save clients_listed
    expect 200 GET "$N1/v1/auth/policies" "$ADMIN"
    save policy
    expect 200 GET "$N1/oauth/jwks.json" ""
    save jwks
    expect 200 GET "$N1/v1/audit?since=0&limit=1000" "$ADMIN"
    save audit
    expect 200 GET "$N1/v1/subscriptions/jobs-workers" "$ADMIN"
    save subscriptions/jobs-workers/described
    expect 200 GET "$N1/v1/subscriptions/jobs-keyed" "$ADMIN"
    save subscriptions/jobs-keyed/described
    expect 200 GET "$N1/v1/groups/billing" "$ADMIN"
    save groups/billing

    # Last, as they depend on time: a group member whose session is alive at the stop, and a
    # compacted partition whose newest messages are younger than its min_compaction_lag_ms.
    log "a live group member"
    expect 200 POST "$N2/v1/groups/shipping/members" "$CONSUMER" \
        '{"topics":["orders","telemetry-zstd"],"session_timeout_ms":10000}'
    member=$(jget "$ANSWER" member_id)
    generation=$(jget "$ANSWER" generation)
    expect 200 POST "$N2/v1/groups/shipping/members/$member/poll" "$CONSUMER" '{"max_messages":100,"max_wait_ms":1000}'
    expect 204 POST "$N3/v1/groups/shipping/offsets" "$CONSUMER" "{\"member_id\":\"$member\",\"generation\":$generation,
        \"offsets\":[{\"topic\":\"orders\",\"partition\":0,\"offset\":1},{\"topic\":\"telemetry-zstd\",\"partition\":0,\"offset\":3}]}"

    # Enough of them that the share written since the last pass (6 of 11 or more) reaches
    # cleaner_min_dirty_ratio (0.5): the test's node plans a pass on its first check.
    log "dirty messages of the compacted partition"
    expect 200 POST "$N3/v1/topics/profiles/messages" "$PRODUCER" \
        '{"messages":[{"key":"a","value":{"name":"a","v":3}},{"key":"b","value":null},{"key":"c","value":{"name":"c","v":3}},
            {"key":"a","value":{"name":"a","v":4}},{"key":"e","value":{"name":"e","v":1}},{"key":"e","value":{"name":"e","v":2}}]}'
    expect 200 POST "$N1/v1/topics/profiles/messages" "$PRODUCER" '{"messages":[{"key":"z-last","value":"the newest batch"}]}'
    wait_until "profiles in sync" "$STATE_DEADLINE" all_in_sync profiles
    expect 200 GET "$N1/v1/topics/profiles" "$ADMIN"
    save topics/profiles/described
    save_partition profiles 0
    expect 200 GET "$N1/v1/groups/shipping" "$ADMIN"
    save groups/shipping
    expect 200 POST "$N2/v1/groups/shipping/members/$member/heartbeat" "$CONSUMER"
}

# --- the fixtures ---------------------------------------------------------------------------

write_config() { # write_config FILE [INITIAL_CLUSTER]
    {
        echo "# The configuration the format-$FORMAT fixture's nodes ran with (node id, data directory"
        echo "# and addresses are flags). Written by migrations/$FORMAT/generate.sh."
        [[ -n ${2-} ]] && echo "initial_cluster = \"$2\""
        echo "retention_check_interval_ms = 1000"
        echo
        echo "[auth]"
        echo "enabled = true"
        echo "issuer = \"https://herald-fixture-$FORMAT.invalid\""
        echo
        echo "[audit]"
        echo "retention_ms = -1"
    } >"$1"
}

finish_fixture() { # finish_fixture NAME NODES_JSON: archives and expected.json into the fixture
    local name=$1 nodes=$2 out=$HERE/$1 id
    rm -f "$out"/*.tar.gz
    if [[ ${#NODE_DATA[@]} == 1 ]]; then
        archive "${NODE_DATA[1]}" "$out/data.tar.gz"
    else
        for id in "${!NODE_DATA[@]}"; do archive "${NODE_DATA[$id]}" "$out/node-$id.tar.gz"; done
    fi
    printf '%s\n' "$CLUSTER_SECRET" >"$out/cluster-secret"
    record format "$FORMAT"
    record generated_at_ms "$GENERATED_AT_MS"
    record nodes "$nodes"
    dir_to_json "$STATE" >"$WORK/$FIXTURE/expected.json"
    pretty "$WORK/$FIXTURE/expected.json" >"$out/expected.json"
    log "$name: $(du -cb "$out"/*.tar.gz | tail -n 1 | cut -f1) bytes of archives"
}

one_node() {
    log "one-node fixture"
    local out=$HERE/one-node
    mkdir -p "$out"
    write_config "$out/herald.toml"
    RF=1
    FIXTURE=one-node
    STATE=$WORK/$FIXTURE/state
    NODE_PID=() NODE_HTTP=() NODE_RAFT=() NODE_DATA=() NODE_LOG=()
    start_node 1 127.61.31.1:17180 127.61.31.1:17101 "$out/herald.toml"
    wait_until "node 1 ready" "$START_DEADLINE" node_ready 1
    N1=http://${NODE_HTTP[1]} N2=$N1 N3=$N1
    GENERATED_AT_MS=$(now_ms)
    build_state
    stop_nodes 1
    finish_fixture one-node '[{"node_id":1,"http_addr":"127.61.31.1:17180","raft_addr":"127.61.31.1:17101"}]'
}

three_node() {
    log "three-node fixture"
    local out=$HERE/three-node id
    local initial=1=127.61.32.1:17101,2=127.61.32.2:17101,3=127.61.32.3:17101
    mkdir -p "$out"
    write_config "$out/herald.toml" "$initial"
    RF=3
    FIXTURE=three-node
    STATE=$WORK/$FIXTURE/state
    NODE_PID=() NODE_HTTP=() NODE_RAFT=() NODE_DATA=() NODE_LOG=()
    for id in 1 2 3; do start_node "$id" "127.61.32.$id:17180" "127.61.32.$id:17101" "$out/herald.toml"; done
    for id in 1 2 3; do wait_until "node $id ready" "$START_DEADLINE" node_ready "$id"; done
    N1=http://${NODE_HTTP[1]} N2=http://${NODE_HTTP[2]} N3=http://${NODE_HTTP[3]}
    wait_until "the admin credentials" "$START_DEADLINE" test -s "${NODE_DATA[1]}/admin-credentials"
    GENERATED_AT_MS=$(now_ms)
    build_state
    stop_nodes 1 2 3
    finish_fixture three-node "[$(for id in 1 2 3; do
        [[ $id == 1 ]] || printf ','
        printf '{"node_id":%s,"http_addr":"127.61.32.%s:17180","raft_addr":"127.61.32.%s:17101"}' "$id" "$id" "$id"
    done)]"
}

started=$SECONDS
for fixture in $FIXTURES; do
    case $fixture in
        one-node) one_node ;;
        three-node) three_node ;;
        *) die "unknown fixture $fixture (one-node, three-node)" ;;
    esac
done

commit=${HERALD_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}
if [[ -z ${HERALD_COMMIT-} && -n $(git -C "$REPO" status --porcelain -- src crates Cargo.toml Cargo.lock 2>/dev/null) ]]; then
    commit=$commit-dirty
fi
cat >"$WORK/manifest.json" <<EOF
{"format":$FORMAT,"herald_version":"$("$HERALD" --version)","git_commit":"$commit",
 "generated_at":"$(date -u +%Y-%m-%dT%H:%M:%SZ)","generator":"migrations/$FORMAT/generate.sh",
 "fixtures":["one-node","three-node"],"took_seconds":$((SECONDS - started))}
EOF
pretty "$WORK/manifest.json" >"$HERE/manifest.json"
log "done in $((SECONDS - started))s: $(du -cb "$HERE"/*/*.tar.gz | tail -n 1 | cut -f1) bytes of archives"
