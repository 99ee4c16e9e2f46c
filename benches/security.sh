#!/usr/bin/env bash
# What security costs (release build by default), issue 14's figures: ROUNDS alternating rounds
# on three one-node servers started side by side, then medians and ratios of medians:
#   plain   no TLS, auth off: the baseline;
#   auth    no TLS, `--auth`: every request carries a bearer token (an ES256 JWT checked
#           against the replicated keys) and is authorized by the casbin enforcer;
#   tls     TLS on the client port (a certificate from a CA this script makes with openssl),
#           auth off.
# Rounds alternate which side of each pair runs first. Workloads: single 100 B messages per POST on 64 connections (`single`), 1000 x 100 B batches
# (`batch`) with auth on against off, and 1000 x 1 KB batches (`batch1k`) with TLS on against off.
#
#   benches/security.sh
#   ROUNDS=1 SINGLE=20000 benches/security.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
ROUNDS=${ROUNDS:-4}
SINGLE=${SINGLE:-50000}
BATCH=${BATCH:-1000000}
BATCH1K=${BATCH1K:-300000}
PORT=${PORT:-19860}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir security

# A CA and a certificate for 127.0.0.1 / localhost, valid for a day.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=bench CA" \
    -keyout "$DIR/ca.key" -out "$DIR/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$DIR/node.key" -out "$DIR/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$DIR/san.ext"
openssl x509 -req -in "$DIR/node.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" -CAcreateserial -days 1 \
    -extfile "$DIR/san.ext" -out "$DIR/node.pem" 2>/dev/null

# serve NAME OFFSET ARGS...: a fresh one-node server on PORT+OFFSET.
serve() {
    local name=$1 offset=$2
    shift 2
    "$HERALD" serve --data-dir "$DIR/$name" --http-addr "127.0.0.1:$((PORT + offset))" \
        --raft-addr "127.0.0.1:$((PORT + offset + 1))" "$@" >>"$DIR/$name.log" 2>&1 &
    PIDS+=($!)
}
serve plain 0
serve auth 2 --auth
serve tls 4 --tls-cert "$DIR/node.pem" --tls-key "$DIR/node.key"
wait_for_ports "$PORT" $((PORT + 2))
deadline=$(($(now_ms) + 60000))
until curl -sf --cacert "$DIR/ca.pem" "https://127.0.0.1:$((PORT + 4))/readyz" >/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "the TLS node did not start" >&2; tail "$DIR/tls.log" >&2; exit 1; }
    sleep 0.1
done

# The auth node's bootstrap admin client (written once, 0600) gets the token every request sends.
deadline=$(($(now_ms) + 30000))
until [ -s "$DIR/auth/admin-credentials" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || { echo "no admin credentials" >&2; tail "$DIR/auth.log" >&2; exit 1; }
    sleep 0.1
done
client_id=$(sed -n 's/^client_id *= *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$DIR/auth/admin-credentials")
client_secret=$(sed -n 's/^client_secret *= *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$DIR/auth/admin-credentials")
TOKEN=$(curl -sf -u "$client_id:$client_secret" -d grant_type=client_credentials \
    "http://127.0.0.1:$((PORT + 2))/oauth/token" | json 'd["access_token"]')

PLAIN="http://127.0.0.1:$PORT"
AUTH="http://127.0.0.1:$((PORT + 2))"
TLS="https://127.0.0.1:$((PORT + 4))"

# bench LABEL SERVER ARGS...: one `herald bench produce`, its JSON report appended to LABEL.json.
bench() {
    local label=$1 server=$2
    shift 2
    "$HERALD" bench produce --server "$server" --json "$@" 2>>"$DIR/bench.log" >>"$DIR/$label.json"
}

# pair FIRST SECOND: runs two `bench` calls (each a quoted command line) in an order that
# alternates by round, so neither side always follows the other's disk writes (flushes and
# compactions of the previous run land on whichever runs next).
pair() {
    if [ $((round % 2)) = 1 ]; then eval "$1"; eval "$2"; else eval "$2"; eval "$1"; fi
}

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round" >&2
    pair 'bench single-plain "$PLAIN" --topic "s$round" --message-size 100 --raw --connections 64 --messages "$SINGLE"' \
        'HERALD_TOKEN=$TOKEN bench single-auth "$AUTH" --topic "s$round" --message-size 100 --raw --connections 64 --messages "$SINGLE"'
    pair 'bench batch-plain "$PLAIN" --topic "b$round" --message-size 100 --batch-size 1000 --connections 8 --messages "$BATCH"' \
        'HERALD_TOKEN=$TOKEN bench batch-auth "$AUTH" --topic "b$round" --message-size 100 --batch-size 1000 --connections 8 --messages "$BATCH"'
    pair 'bench batch1k-plain "$PLAIN" --topic "k$round" --message-size 1000 --batch-size 1000 --connections 8 --messages "$BATCH1K"' \
        'HERALD_CA_CERT=$DIR/ca.pem bench batch1k-tls "$TLS" --topic "k$round" --message-size 1000 --batch-size 1000 --connections 8 --messages "$BATCH1K"'
done

figure() { while read -r line; do echo "$line" | json "$2"; done <"$DIR/$1.json" | median; }
spread() { while read -r line; do echo "$line" | json "$2"; done <"$DIR/$1.json" | sort -g | awk '{a[NR]=$1} END {printf "%.0f..%.0f", a[1], a[NR]}'; }
printf '%-14s %12s %9s %9s %9s  %s\n' workload msgs/s MB/s "p99 ms" errors "msgs/s range"
for label in single-plain single-auth batch-plain batch-auth batch1k-plain batch1k-tls; do
    printf '%-14s %12.0f %9.1f %9.2f %9.0f  %s\n' "$label" "$(figure "$label" 'd["messages_per_sec"]')" \
        "$(figure "$label" 'd["mb_per_sec"]')" "$(figure "$label" 'd["latency_ms"]["p99"]')" "$(figure "$label" 'd.get("errors", 0)')" \
        "$(spread "$label" 'd["messages_per_sec"]')"
done
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
echo "auth on / off, single POSTs (msgs/s): $(ratio "$(figure single-auth 'd["messages_per_sec"]')" "$(figure single-plain 'd["messages_per_sec"]')")"
echo "auth on / off, 1000-batches (msgs/s): $(ratio "$(figure batch-auth 'd["messages_per_sec"]')" "$(figure batch-plain 'd["messages_per_sec"]')")"
echo "TLS on / off, 1 KB x 1000 (MB/s):     $(ratio "$(figure batch1k-tls 'd["mb_per_sec"]')" "$(figure batch1k-plain 'd["mb_per_sec"]')")"
