#!/usr/bin/env bash
# Failover time: SIGKILL a partition leader of a 3-node cluster on this machine, then measure
# the time until the first successful acks=all produce to that partition through a survivor.
# Repeats RUNS times (restarting the killed node and waiting for it to be in sync in between)
# and prints every sample and the median, in milliseconds.
#
#   benches/cluster-failover.sh            # uses $CARGO_TARGET_DIR/release/herald
#   HERALD=path/to/herald RUNS=5 benches/cluster-failover.sh
set -euo pipefail

RUNS=${RUNS:-5}
BASE_HTTP=${BASE_HTTP:-19180}
BASE_RAFT=${BASE_RAFT:-19170}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_LOGS=''                    # (not a knob of this bench)
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" failover

start_cluster
create_topic 1 failover 1 3

samples=()
for run in $(seq 1 "$RUNS"); do
    # Wait until all three replicas are in sync and the leader is known.
    deadline=$(( $(now_ms) + 60000 ))
    while :; do
        state=$(curl -sf "$(url 1 /v1/topics/failover)" || curl -sf "$(url 2 /v1/topics/failover)" || echo '{}')
        leader=$(echo "$state" | json "d['partitions'][0]['leader'] or 0" 2>/dev/null || echo 0)
        in_sync=$(echo "$state" | json "len(d['partitions'][0]['in_sync'])" 2>/dev/null || echo 0)
        [ "$leader" != 0 ] && [ "$in_sync" = 3 ] && break
        [ "$(now_ms)" -lt "$deadline" ] || { echo "replicas never in sync" >&2; exit 1; }
        sleep 0.2
    done
    curl -sf -XPOST "$(url "$leader" /v1/topics/failover/messages)" -H 'content-type: application/json' \
        -d '{"messages":[{"value":"before"}]}' >/dev/null
    survivor=$(( leader % 3 + 1 ))
    kill -9 "${PIDS[$leader]}"
    killed_at=$(now_ms)
    while :; do
        if curl -sf -m 30 -XPOST "$(url "$survivor" '/v1/topics/failover/messages?acks=all')" \
            -H 'content-type: application/json' -d '{"messages":[{"value":"after"}]}' >/dev/null; then
            break
        fi
        sleep 0.01
    done
    took=$(( $(now_ms) - killed_at ))
    samples+=("$took")
    echo "run $run: killed leader node $leader, first acks=all produce through node $survivor after ${took} ms"
    start_node "$leader" --initial-cluster "$CLUSTER"
    wait_ready "$leader"
done

median=$(printf '%s\n' "${samples[@]}" | median)
echo "failover samples (ms): ${samples[*]}"
echo "failover median: ${median} ms over ${RUNS} runs"
