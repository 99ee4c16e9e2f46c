#!/usr/bin/env bash
# Idle cost of partitions: a 3-node cluster on this machine with PARTITIONS partitions of
# replication factor 3 (each node holds a replica of every partition and leads a third), no
# traffic. Prints how long creating the topics (100 partitions each) and settling took, waits
# until the idle groups went quiet (`herald_raft_quiet_groups`, docs/clustering.md "Quiescent
# groups"), then measures each node's CPU use over SECONDS_MEASURED seconds (from
# /proc/PID/stat) and its resident memory. With RESTART=1 it then restarts node 1 (SIGTERM,
# start) and prints how long until it is ready and until every partition has 3 in-sync
# replicas again; RESTARTS=N does that N times. AWAY_S=N keeps it stopped N seconds first and
# prints the other nodes' CPU use meanwhile (their groups go quiet without it). PERF=1 records
# node 1 with `perf` while idle and prints the hottest functions (perf_event_paranoid
# permitting).
#
#   benches/cluster-idle.sh                              # 300 partitions, quiescence on
#   PARTITIONS=1000 RESTART=1 benches/cluster-idle.sh
#   PARTITIONS=10000 RESTART=1 RESTARTS=3 AWAY_S=30 benches/cluster-idle.sh
#   QUIESCE_AFTER_MS=0 benches/cluster-idle.sh           # quiescence off: the baseline
#   EXTRA_ARGS="--heartbeat-interval-ms 1000" benches/cluster-idle.sh
set -euo pipefail

PARTITIONS=${PARTITIONS:-300}
SECONDS_MEASURED=${SECONDS_MEASURED:-20}
QUIESCE_AFTER_MS=${QUIESCE_AFTER_MS:-2000}
RESTART=${RESTART:-0}
AWAY_S=${AWAY_S:-0}
PERF=${PERF:-0}
BASE_HTTP=${BASE_HTTP:-19280}
BASE_RAFT=${BASE_RAFT:-19270}
EXTRA_ARGS=${EXTRA_ARGS:-}
RESTARTS=${RESTARTS:-1}           # with RESTART=1: how many times node 1 is restarted
READY_S=${READY_S:-60}            # a restart not ready within this long is reported as such,
READY_LATE_S=${READY_LATE_S:-240} # and waited for this much longer before the bench gives up
KEEP_LOGS=${KEEP_LOGS:-}          # a directory to keep the nodes' logs in
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" idle

rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
metric() { curl -sf -m 10 "$(url "$1" /metrics)" | awk -v name="$2" '$1 == name {print $2}'; }
# wait_quiet ID DEADLINE_MS: until node ID has at least PARTITIONS quiet groups (internal topics'
# count too), or the deadline passed (then says how many).
wait_quiet() {
    until [ "$(metric "$1" herald_raft_quiet_groups | cut -d. -f1)" -ge "$PARTITIONS" ] 2>/dev/null; do
        [ "$(now_ms)" -lt "$2" ] || { echo "node $1: $(metric "$1" herald_raft_quiet_groups) of $PARTITIONS groups quiet" >&2; return; }
        sleep 1
    done
}

printf '[raft]\nquiesce_after_ms = %s\n' "$QUIESCE_AFTER_MS" >"$DIR/herald.toml"
EXTRA_ARGS="--config $DIR/herald.toml $EXTRA_ARGS"

start_cluster 120
topics=$(( (PARTITIONS + 99) / 100 ))
started=$(now_ms)
for topic in $(seq 1 "$topics"); do
    count=$(( PARTITIONS - (topic - 1) * 100 )); [ "$count" -gt 100 ] && count=100
    create_topic 1 "idle$topic" "$count" 3
done
created=$(now_ms)
echo "created $topics topics, $PARTITIONS partitions, in $(( created - started )) ms ($(awk -v p="$PARTITIONS" -v ms="$(( created - started ))" 'BEGIN {printf "%.0f", p * 1000 / ms}') partitions/s)"
# Settle: every partition has a leader and 3 in-sync replicas, leaders handed back.
# shellcheck disable=SC2046
wait_topics 600 1 "len(p['in_sync']) == 3" $(seq -f 'idle%.0f' 1 "$topics")
echo "every partition had 3 in-sync replicas $(( $(now_ms) - created )) ms later"
if [ "$QUIESCE_AFTER_MS" != 0 ]; then
    deadline=$(( $(now_ms) + 300000 ))
    for id in 1 2 3; do wait_quiet "$id" "$deadline"; done
fi
sleep 12
declare -A before
for id in 1 2 3; do before[$id]=$(proc_ticks "${PIDS[$id]}"); done
sleep "$SECONDS_MEASURED"
total=0
for id in 1 2 3; do
    used=$(( $(proc_ticks "${PIDS[$id]}") - before[$id] ))
    pct=$(awk -v t="$used" -v hz="$HZ" -v s="$SECONDS_MEASURED" 'BEGIN {printf "%.1f", 100 * t / hz / s}')
    total=$(awk -v a="$total" -v b="$pct" 'BEGIN {print a + b}')
    leads=$(curl -sf "$(url "$id" /v1/cluster)" | json "[len(n['leader_of']) for n in d['nodes'] if n['id'] == $id][0]")
    echo "node $id: ${pct}% of one core, RSS $(rss_mib "${PIDS[$id]}") MiB, leads $leads partitions, $(metric "$id" herald_raft_quiet_groups) quiet groups"
done
echo "idle: $PARTITIONS partitions x 3 replicas; mean CPU per node $(awk -v t="$total" 'BEGIN {printf "%.1f", t / 3}')% of one core over ${SECONDS_MEASURED}s (quiesce_after_ms $QUIESCE_AFTER_MS; args: ${EXTRA_ARGS})"

if [ "$PERF" = 1 ]; then
    perf record -F 499 -g -o "$DIR/perf.data" -p "${PIDS[1]}" -- sleep "$SECONDS_MEASURED" >/dev/null 2>&1
    echo "node 1, idle: the hottest functions (perf, self time)"
    # (`head` closes the pipe early: not a failure of the bench)
    perf report -i "$DIR/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
        | grep -E '^ +[0-9]' | sed 's/  *- *- *$//' | head -40 || true
    [ -z "$KEEP_LOGS" ] || cp "$DIR/perf.data" "$KEEP_LOGS/"
fi

if [ "$RESTART" = 1 ]; then
  for round in $(seq 1 "$RESTARTS"); do
    kill -TERM "${PIDS[1]}"
    wait "${PIDS[1]}" 2>/dev/null || true
    if [ "$AWAY_S" -gt 0 ]; then
        # Let the groups it led elect elsewhere and go quiet without it, then measure.
        sleep "$(( AWAY_S / 2 ))"
        for id in 2 3; do before[$id]=$(proc_ticks "${PIDS[$id]}"); done
        sleep "$(( AWAY_S - AWAY_S / 2 ))"
        for id in 2 3; do
            used=$(( $(proc_ticks "${PIDS[$id]}") - before[$id] ))
            echo "node 1 away: node $id used $(awk -v t="$used" -v hz="$HZ" -v s="$(( AWAY_S - AWAY_S / 2 ))" 'BEGIN {printf "%.1f", 100 * t / hz / s}')% of one core, $(metric "$id" herald_raft_quiet_groups) quiet groups"
        done
    fi
    restarted=$(now_ms)
    start_node 1 --initial-cluster "$CLUSTER"
    if ready_within 1 "$READY_S"; then
        ready="$(( $(now_ms) - restarted )) ms"
    elif ready_within 1 "$READY_LATE_S"; then
        ready="not within ${READY_S} s, after $(( $(now_ms) - restarted )) ms"
    else
        echo "restart $round of node 1: not ready within $(( READY_S + READY_LATE_S )) s" >&2
        exit 1
    fi
    # shellcheck disable=SC2046
    wait_topics 600 2 "len(p['in_sync']) == 3" $(seq -f 'idle%.0f' 1 "$topics")
    echo "restart $round of node 1 holding $PARTITIONS replicas: ready $ready, every partition 3 in sync after $(( $(now_ms) - restarted )) ms; RSS $(rss_mib "${PIDS[1]}") MiB"
    if [ "$round" -lt "$RESTARTS" ] && [ "$QUIESCE_AFTER_MS" != 0 ]; then
        # The next restart begins from quiet groups, as the first did.
        wait_quiet 1 $(( $(now_ms) + 300000 ))
        sleep 5
    fi
  done
fi
