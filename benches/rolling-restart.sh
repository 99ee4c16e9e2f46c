#!/usr/bin/env bash
# Rolling restarts under load (issue 32): three nodes on loopback, each stopped with SIGTERM and
# started again in turn, ROLLS times, while three acks=all producers, a consumer group member
# (poll and commit) and a queue subscription's puller (pull and ack) send through the nodes in
# rotation; a node leaves the rotation before it is stopped and comes back once it is ready and
# every partition is in sync again (docs/operations.md#rolling-restarts). RUNS runs; each prints
# the requests sent, how many failed (aim: 0), the longest request, and whether each node handed
# off its leadership. Every run also checks that nothing acknowledged was lost or duplicated and
# that both readers got every acknowledged message (the run fails otherwise).
#
#   benches/rolling-restart.sh               # RUNS=3 runs of ROLLS=3 rolls
#   RUNS=1 ROLLS=1 benches/rolling-restart.sh
#
# It runs the test tests/it/cluster/cluster_rolling_restart.rs with HERALD_ROLLS set, so the
# nodes are the debug build the test suite uses: what it measures is failures and the longest
# request during the roll, not throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
ROLLS=${ROLLS:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/herald-target}
cargo test --workspace --test it --no-run >&2
for run in $(seq 1 "$RUNS"); do
    HERALD_ROLLS=$ROLLS cargo test --workspace --test it -- --exact \
        cluster::cluster_rolling_restart::a_rolling_restart_under_load_fails_no_request_and_loses_nothing \
        --nocapture 2>&1 | grep -E "^rolling restart of|test result|panicked|requests failed" \
        | sed "s/^/run $run: /"
done
