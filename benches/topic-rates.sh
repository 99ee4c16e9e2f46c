#!/usr/bin/env bash
# Topic administration rates (issue 34): on a fresh cluster of NODES nodes (3; 1 for a single
# node), each of RUNS rounds
#   1. creates TOPICS topics (1 partition each, replication factor RF) with CONCURRENCY clients
#      (POST /v1/topics), the clients spread over the nodes;
#   2. lists them page by page (GET /v1/topics?limit=LIMIT&page_token=...) from node 1, whole
#      passes until at least LIST_TOPICS topics were listed (10,000: 10 passes over 1,000
#      topics, one over 10,000), LIST_CLIENTS clients (1: one client walking the pages), and
#      checks that every pass saw each topic once, in name order;
#   3. describes every topic (GET /v1/topics/{name}) with CONCURRENCY clients over the nodes;
#   4. deletes every topic (DELETE /v1/topics/{name}) with CONCURRENCY clients over the nodes,
#      then checks that the list is empty.
# After the creation it prints the vote requests the nodes sent (elections of the new groups)
# and the raft messages that found their group not yet running on the receiver (`started`
# within the wait, or `refused`).
# Each phase prints operations/s, p50/p99/max per request, the CPU the nodes spent and the
# machine's busy share outside the nodes and the load tool (`outside`: another build running
# alongside shows here and spoils the figures); the
# load tool is a Python script (standard library only: one keep-alive HTTP/1.1 connection per
# client, each request timed from send to the last byte of the answer). Only the expected
# status counts as a success (201/200 create, 200 list and describe, 204 delete); the others
# are counted as errors, with a few examples, and left out of the rates and latencies. Then
# the medians over the rounds. The nodes' WARN/ERROR lines of each round are summarised.
#
#   benches/topic-rates.sh                              # 3 nodes, RF 3, 1,000 topics, 1 round
#   RUNS=3 benches/topic-rates.sh
#   TOPICS=100 benches/topic-rates.sh                   # a smoke run
#   TOPICS=10000 NODES=1 benches/topic-rates.sh         # listing 10,000 on one node (RF 1)
#   LIMIT=1000 CONCURRENCY=16 benches/topic-rates.sh
set -euo pipefail

RUNS=${RUNS:-1}
TOPICS=${TOPICS:-1000}
NODES=${NODES:-3}
RF=${RF:-$(( NODES < 3 ? NODES : 3 ))}
CONCURRENCY=${CONCURRENCY:-8}
LIMIT=${LIMIT:-100}               # topics per page, 1 to 1000 (MAX_PAGE_LIMIT)
LIST_TOPICS=${LIST_TOPICS:-10000} # list whole passes until at least this many topics were listed
LIST_CLIENTS=${LIST_CLIENTS:-1}
SETTLE_S=${SETTLE_S:-5}           # pause between phases (new groups elect, then go quiet)
REQUEST_TIMEOUT_S=${REQUEST_TIMEOUT_S:-120}
PHASE_TIMEOUT_S=${PHASE_TIMEOUT_S:-1800}
BASE_HTTP=${BASE_HTTP:-19880}
BASE_RAFT=${BASE_RAFT:-19870}
EXTRA_ARGS=${EXTRA_ARGS:-}
KEEP_LOGS=${KEEP_LOGS:-}          # a directory to keep the nodes' logs, results.tsv and each
                                  # phase's requests (req-rROUND-PHASE.json: start s, ms, status, what) in
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib/cluster.sh" topics

[ "$LIMIT" -ge 1 ] && [ "$LIMIT" -le 1000 ] || { echo "LIMIT must be 1 to 1000" >&2; exit 1; }
[ "$RF" -le "$NODES" ] || { echo "RF $RF > NODES $NODES" >&2; exit 1; }

# The load tool: one phase per invocation, one JSON line out.
cat >"$DIR/load.py" <<'PY'
import http.client, json, os, sys, threading, time, urllib.parse

phase, urls, topics, concurrency, limit, rf, list_topics, list_clients, timeout, trace = sys.argv[1:11]
urls = urls.split(",")
topics, concurrency, limit, rf = int(topics), int(concurrency), int(limit), int(rf)
list_topics, list_clients, timeout = int(list_topics), int(list_clients), float(timeout)
names = ["bench-%06d" % i for i in range(topics)]  # zero-padded: name order is number order

lock = threading.Lock()
latencies, errors, examples, requests = [], 0, [], []  # requests: (start s, ms, status, what)
extra = {"pages": 0, "listed": 0, "bad_passes": 0}

class Client:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.conn = None

    def request(self, method, path, body=None):
        """(status, body bytes, seconds); a failed connection is (None, error text, seconds)."""
        headers = {"content-type": "application/json"} if body is not None else {}
        start = time.perf_counter()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
            return resp.status, data, time.perf_counter() - start
        except Exception as e:  # reset, timeout: a new connection for the next request
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return None, repr(e).encode(), time.perf_counter() - start

def record(status, data, seconds, ok, what):
    global errors
    with lock:
        requests.append((round(time.perf_counter() - seconds - started, 4), round(1000 * seconds, 2), status, what))
        if status in ok:
            latencies.append(seconds)
        else:
            errors += 1
            if len(examples) < 5:
                examples.append(f"{what}: {status} {data[:200].decode(errors='replace')}")

def run_items(items, op):
    """op(client, item) for every item, on `concurrency` clients over the nodes."""
    cursor = iter(items)
    def worker(w):
        client = Client(urls[w % len(urls)])
        while True:
            with lock:
                item = next(cursor, None)
            if item is None:
                return
            op(client, item)
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads: t.start()
    for t in threads: t.join()

def create(client, name):
    body = json.dumps({"name": name, "partitions": 1, "replication_factor": rf})
    record(*client.request("POST", "/v1/topics", body), (200, 201), f"POST {name} @{client.port}")

def describe(client, name):
    record(*client.request("GET", "/v1/topics/" + name), (200,), f"GET {name} @{client.port}")

def delete(client, name):
    record(*client.request("DELETE", "/v1/topics/" + name), (204,), f"DELETE {name} @{client.port}")

def list_pass(client):
    """Walks every page once; True when it saw each topic once, in name order."""
    token, seen = None, []
    while True:
        path = f"/v1/topics?limit={limit}"
        if token:
            path += "&page_token=" + urllib.parse.quote(token)
        status, data, seconds = client.request("GET", path)
        record(status, data, seconds, (200,), f"GET {path} @{client.port}")
        if status != 200:
            return False
        page = json.loads(data)
        with lock:
            extra["pages"] += 1
            extra["listed"] += len(page["topics"])
        seen += [t["name"] for t in page["topics"]]
        token = page.get("next_page_token")
        if not token:
            return seen == names

def listing(passes):
    def worker(w, count):
        client = Client(urls[0])
        for _ in range(count):
            if not list_pass(client):
                with lock:
                    extra["bad_passes"] += 1
    share = [passes // list_clients + (w < passes % list_clients) for w in range(list_clients)]
    threads = [threading.Thread(target=worker, args=(w, n)) for w, n in enumerate(share) if n]
    for t in threads: t.start()
    for t in threads: t.join()

cpu0, started = os.times(), time.perf_counter()  # (`started` is read by record)
if phase == "create":
    run_items(names, create)
elif phase == "describe":
    run_items(names, describe)
elif phase == "delete":
    run_items(names, delete)
elif phase == "list":
    passes = max(1, -(-list_topics // max(topics, 1)))
    extra["passes"] = passes
    listing(passes)
elif phase == "empty":  # after the deletes: one pass must list nothing
    names = []
    listing(1)
seconds = time.perf_counter() - started
cpu1 = os.times()
json.dump(sorted(requests, key=lambda r: r[0]), open(trace, "w"))
latencies.sort()
pct = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0
print(json.dumps({
    "phase": phase, "ok": len(latencies), "errors": errors, "seconds": seconds,
    "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": 1000 * latencies[-1] if latencies else 0,
    "tool_cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
    "examples": examples, **extra}))
PY

# initial_cluster N: the --initial-cluster of nodes 1..N.
initial_cluster() {
    local id sep= out=
    for id in $(seq 1 "$1"); do out="$out$sep$id=127.0.0.1:$((BASE_RAFT + id))"; sep=,; done
    echo "$out"
}

# The nodes log JSON lines when their output is not a terminal, text otherwise: both are read.
warn_count() { grep -c '"level":"WARN"\|"level":"ERROR"\| WARN \| ERROR ' "$1" || true; }
# log_warnings N LOG: the N most frequent WARN/ERROR messages of LOG, numbers replaced by N.
log_warnings() {
    python3 - "$@" <<'PY'
import collections, json, re, sys
count = collections.Counter()
for line in open(sys.argv[2], errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    try:
        d = json.loads(line)
        level, text = d.get("level"), d.get("fields", {}).get("message", "") + " (" + d.get("target", "") + ")"
    except ValueError:
        m = re.search(r" (WARN|ERROR) (.*)", line)
        level, text = (m.group(1), m.group(2)) if m else (None, "")
    if level in ("WARN", "ERROR"):
        count[level + " " + re.sub(r"\d+", "N", text)[:200]] += 1
for text, n in count.most_common(int(sys.argv[1])):
    print(f"    {n:6} {text}")
PY
}

# phase ROUND NAME: runs the load tool's phase NAME, prints its line, appends it to results.tsv.
phase() {
    local round=$1 name=$2 ticks0 busy0 started warn0=() id i=0
    ticks0=$(node_ticks) busy0=$(busy_ticks) started=$(now_ms)
    for id in "${IDS[@]}"; do warn0[i]=$(warn_count "${LOGS[$id]}"); i=$((i + 1)); done
    timeout "$PHASE_TIMEOUT_S" python3 "$DIR/load.py" "$name" "$URLS" "$TOPICS" "$CONCURRENCY" \
        "$LIMIT" "$RF" "$LIST_TOPICS" "$LIST_CLIENTS" "$REQUEST_TIMEOUT_S" "$DIR/req-r$round-$name.json" >"$DIR/phase.json" ||
        { echo "phase $name failed or passed ${PHASE_TIMEOUT_S} s" >&2; exit 1; }
    local node_ticks1 busy1 elapsed_ms node_cpu_s warns=0
    node_ticks1=$(node_ticks) busy1=$(busy_ticks) elapsed_ms=$(( $(now_ms) - started ))
    node_cpu_s=$(awk -v t="$(( node_ticks1 - ticks0 ))" -v hz="$HZ" 'BEGIN {printf "%.2f", t / hz}')
    # The machine's busy time outside the nodes and the load tool, % of all cores (other
    # processes: a build alongside makes a contended measurement; plus the kernel's own work).
    local busy_s
    busy_s=$(awk -v t="$(( busy1 - busy0 ))" -v hz="$HZ" 'BEGIN {printf "%.2f", t / hz}')
    i=0
    for id in "${IDS[@]}"; do
        warns=$(( warns + $(warn_count "${LOGS[$id]}") - warn0[i] )); i=$((i + 1))
    done
    python3 - "$round" "$node_cpu_s" "$warns" "$DIR/phase.json" "$busy_s" "$elapsed_ms" "$(nproc)" >>"$DIR/results.tsv" <<'PY'
import json, sys
round_, node_cpu, warns, path, busy_s, elapsed_ms, cores = sys.argv[1:8]
r = json.load(open(path))
outside = 100 * max(0.0, float(busy_s) - float(node_cpu) - r["tool_cpu_s"]) / (int(elapsed_ms) / 1000) / int(cores)
ops = r["pages"] if r["phase"] in ("list", "empty") else r["ok"]
topics = r["listed"] if r["phase"] in ("list", "empty") else r["ok"]
print("\t".join(str(v) for v in (
    round_, r["phase"], ops, topics, f"{r['seconds']:.3f}", f"{ops / r['seconds']:.1f}",
    f"{topics / r['seconds']:.1f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['max_ms']:.2f}",
    r["errors"], r.get("bad_passes", 0), node_cpu, f"{r['tool_cpu_s']:.1f}", warns,
    " | ".join(e.replace("\t", " ").replace("\n", " ") for e in r["examples"]) or "-", f"{outside:.0f}")))
PY
    tail -1 "$DIR/results.tsv" | awk -F'\t' '{
        unit = ($2 == "list" || $2 == "empty") ? "pages" : "topics"
        printf "round %s  %-8s %6d %-6s in %7.2f s: %8.1f %s/s", $1, $2, $3, unit, $5, $6, unit
        if (unit == "pages") printf " (%.0f topics/s)", $7
        printf "  p50 %7.2f ms  p99 %7.2f ms  max %8.2f ms  errors %s", $8, $9, $10, $11
        if ($12 > 0) printf "  BAD PASSES %s", $12
        printf "  nodes %s CPU-s, load tool %s, outside %s%%, %s WARN/ERROR log lines\n", $13, $14, $17, $15
        if ($16 != "-") printf "    e.g. %s\n", $16 }'
}

# running PID: the process runs (a child that exited and was not waited for yet is a zombie).
running() { local state; state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$state" ] && [ "$state" != Z ]; }

# Summed over the nodes: vote requests sent (pre-votes and votes: elections), and raft messages
# for a group not yet running on the receiver that waited for it to start or were refused.
raft_counters() {
    local id
    for id in "${IDS[@]}"; do curl -sf -m 10 "$(url "$id" /metrics)" || true; done | awk '
        /^herald_raft_vote_requests_total\{.*kind="pre_vote"/ { pre += $2 }
        /^herald_raft_vote_requests_total\{.*kind="vote"/ { vote += $2 }
        /^herald_raft_absent_group_messages_total\{.*outcome="started"/ { started += $2 }
        /^herald_raft_absent_group_messages_total\{.*outcome="refused"/ { refused += $2 }
        END { printf "%d pre-votes, %d votes; %d messages waited for their group to start, %d refused (group not running)", pre, vote, started, refused }'
}

run_round() {
    local round=$1 id members deadline
    if [ "$NODES" = 1 ]; then
        IDS=(0)
        start_node_at 0 "$DIR/r$round-d0" "$DIR/log-r$round-n0"
    else
        IDS=($(seq 1 "$NODES"))
        members=$(initial_cluster "$NODES")
        for id in "${IDS[@]}"; do
            start_node_at "$id" "$DIR/r$round-d$id" "$DIR/log-r$round-n$id" --initial-cluster "$members"
        done
    fi
    for id in "${IDS[@]}"; do wait_ready "$id"; done
    deadline=$(( $(now_ms) + 60000 ))
    until [ "$(curl -sf -m 5 "$(url "${IDS[0]}" /v1/cluster)" | json "sum(n['status'] == 'up' for n in d['nodes'])" 2>/dev/null)" = "$NODES" ]; do
        [ "$(now_ms)" -lt "$deadline" ] || { echo "nodes never all up" >&2; tail -20 "${LOGS[${IDS[0]}]}" >&2; exit 1; }
        sleep 0.2
    done
    URLS=$(for id in "${IDS[@]}"; do url "$id" ""; done | paste -sd,)
    sleep "$SETTLE_S"
    phase "$round" create
    echo "  create: elections and votes over the nodes: $(raft_counters)"
    sleep "$SETTLE_S"
    phase "$round" list
    phase "$round" describe
    sleep "$SETTLE_S"
    phase "$round" delete
    phase "$round" empty
    for id in "${IDS[@]}"; do
        echo "  node $id: $(warn_count "${LOGS[$id]}") WARN/ERROR lines; most frequent (numbers as N):"
        log_warnings 3 "${LOGS[$id]}"
    done
    # Stop: SIGTERM, SIGKILL whoever still runs 30 s later (not measured).
    for id in "${IDS[@]}"; do kill "${PIDS[$id]}" 2>/dev/null || true; done
    deadline=$(( $(now_ms) + 30000 ))
    for id in "${IDS[@]}"; do
        while running "${PIDS[$id]}" && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.2; done
        kill -9 "${PIDS[$id]}" 2>/dev/null || true
        wait "${PIDS[$id]}" 2>/dev/null || true
        unset "PIDS[$id]"
    done
    rm -rf "$DIR"/r"$round"-d*
}

echo "herald: $HERALD ($(date -u -r "$HERALD" '+%F %T UTC'))"
echo "machine: $(nproc) cores; $RUNS round(s); $NODES node(s), $TOPICS topics of 1 partition, RF $RF;" \
    "$CONCURRENCY clients (create, describe, delete); pages of $LIMIT, $LIST_CLIENTS list client(s)"
: >"$DIR/results.tsv"
for round in $(seq 1 "$RUNS"); do run_round "$round"; done

python3 - "$DIR/results.tsv" "$RUNS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.setdefault(f[1], []).append(f)
med = lambda runs, i: statistics.median(float(r[i]) for r in runs)
print()
print(f"medians of {sys.argv[2]} round(s); a list request is one page")
print(f"{'phase':9} {'requests':>9} {'req/s':>9} {'topics/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9} {'errors':>6} {'node CPU-ms/req':>15} {'outside %':>9}")
for phase in ("create", "list", "describe", "delete"):
    runs = rows.get(phase)
    if not runs:
        continue
    errors = sum(int(r[10]) + int(r[11]) for r in runs)
    cpu = statistics.median(1000 * float(r[12]) / max(1, int(r[2])) for r in runs)
    print(f"{phase:9} {med(runs, 2):>9,.0f} {med(runs, 5):>9,.1f} {med(runs, 6):>9,.1f} "
          f"{med(runs, 7):>8.2f} {med(runs, 8):>8.2f} {med(runs, 9):>9.2f} {errors:>6} {cpu:>15.2f} {med(runs, 16):>9.0f}")
bad = [r for r in rows.get("empty", []) if int(r[3]) != 0 or int(r[10]) or int(r[11])]
print("after the deletes: " + ("the list was empty in every round" if not bad else f"NOT EMPTY in {len(bad)} round(s)"))
PY
