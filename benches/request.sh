#!/usr/bin/env bash
# Request/reply round trips (release build): `herald bench request` with REQUESTERS concurrent
# requesters against a responder loop, each round trip a request written with acks=all, read by
# the responder (long poll), replied to, and answered.
#  1. one node;
#  2. three nodes, the topic replicated 3 times, requesters on node 1 and the responder on node 2,
#     so every reply crosses the internal RPC.
#
#   benches/request.sh
#   REQUESTS=50000 REQUESTERS=64 benches/request.sh
set -euo pipefail

HERALD=${HERALD:-${CARGO_TARGET_DIR:-/var/tmp/herald-target}/release/herald}
REQUESTS=${REQUESTS:-20000}
REQUESTERS=${REQUESTERS:-16}
PORT=${PORT:-19690}

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/common.sh"
bench_workdir request

echo "== one node, $REQUESTERS requesters, $REQUESTS round trips"
"$HERALD" serve --data-dir "$DIR/single" --http-addr "127.0.0.1:$PORT" --raft-addr "127.0.0.1:$((PORT + 9))" \
    >>"$DIR/single.log" 2>&1 &
PIDS+=($!)
wait_for_ports "$PORT"
"$HERALD" bench request --server "http://127.0.0.1:$PORT" --requesters "$REQUESTERS" --requests "$REQUESTS"
stop_nodes

echo "== three nodes (RF 3), requesters on node 1, responder on node 2"
cluster="1=127.0.0.1:$((PORT + 11)),2=127.0.0.1:$((PORT + 12)),3=127.0.0.1:$((PORT + 13))"
for n in 1 2 3; do
    "$HERALD" serve --node-id "$n" --http-addr "127.0.0.1:$((PORT + n))" --raft-addr "127.0.0.1:$((PORT + 10 + n))" \
        --data-dir "$DIR/n$n" --initial-cluster "$cluster" >>"$DIR/n$n.log" 2>&1 &
    PIDS+=($!)
done
wait_for_ports $((PORT + 1)) $((PORT + 2)) $((PORT + 3))
"$HERALD" bench request --server "http://127.0.0.1:$((PORT + 1))" --responder-server "http://127.0.0.1:$((PORT + 2))" \
    --replication-factor 3 --requesters "$REQUESTERS" --requests "$REQUESTS"
