import { useRef, useState } from "preact/hooks";
import { ApiError, enc, type Cluster, type RebalancePlan } from "../lib/api";
import { api } from "../lib/client";
import { formatNumber } from "../lib/format";
import { ALL_TOPICS_CAP, listAllTopics } from "../lib/topics";
import { ConfirmButton, ErrorText, Field, Link, useAction, useLoad } from "../components/ui";

const REFRESH_MS = 2000;
/** The rebalance plan is read again this often. */
const PLAN_REFRESH_MS = 5000;
/** At most this many of a plan's moves are listed. */
const MOVES_SHOWN = 50;

interface ReplicaCount {
  /** Partition replicas per node, over the topics `GET /v1/topics` lists (not internal ones). */
  replicas: Map<number, number>;
  /** False when more topics than ALL_TOPICS_CAP exist: the count is over the first ones. */
  complete: boolean;
  /** Pages of topics read to count them. */
  pages: number;
  atMs: number;
}

interface ClusterView {
  cluster: Cluster;
  count?: ReplicaCount;
  topicsError?: unknown;
}

async function countReplicas(): Promise<ReplicaCount> {
  const { topics, complete, pages } = await listAllTopics(api);
  const replicas = new Map<number, number>();
  for (const t of topics) for (const p of t.partitions) for (const r of p.replicas) replicas.set(r, (replicas.get(r) ?? 0) + 1);
  return { replicas, complete, pages, atMs: Date.now() };
}

export function ClusterPage() {
  // Counting replicas reads every topic, a page of 1000 a request: with many topics it is done
  // again only after a refresh period per page it took, so the page keeps asking about one page
  // every REFRESH_MS whatever the number of topics.
  const lastCount = useRef<ReplicaCount | undefined>(undefined);
  const loadCluster = async (): Promise<ClusterView> => {
    const cluster = await api.get<Cluster>("/v1/cluster");
    const last = lastCount.current;
    if (last && Date.now() - last.atMs < (last.pages - 1) * REFRESH_MS) return { cluster, count: last };
    try {
      lastCount.current = await countReplicas();
      return { cluster, count: lastCount.current };
    } catch (topicsError) {
      return { cluster, count: last, topicsError };
    }
  };
  const view = useLoad(loadCluster, [], REFRESH_MS);
  const c = view.data?.cluster;
  return (
    <>
      <h1>Cluster</h1>
      <ErrorText error={view.error} />
      {c && (
        <>
          <p>
            Cluster <code>{c.cluster_id}</code> · metadata leader {c.metadata_leader ?? "none known"}
          </p>
          <div class="table-wrap">
            <table data-testid="nodes-table">
              <thead>
                <tr>
                  <th scope="col">Node</th>
                  <th scope="col">Status</th>
                  <th scope="col">Zone</th>
                  <th scope="col">HTTP</th>
                  <th scope="col">Raft</th>
                  <th scope="col" class="num">Leads</th>
                  <th scope="col" class="num">Replicas</th>
                  <th scope="col">Action</th>
                </tr>
              </thead>
              <tbody>
                {c.nodes.map((n) => {
                  const replicas = view.data?.count?.replicas.get(n.id) ?? 0;
                  return (
                    <tr key={n.id}>
                      <td>{n.id}</td>
                      <td>
                        <span class={`status status-${n.status}`}>{n.status}</span>
                        {n.status === "draining" && (
                          <span class="note">
                            {" "}
                            moving {replicas} replicas away <progress aria-label={`Node ${n.id} drain progress`} />
                          </span>
                        )}
                      </td>
                      <td>{n.zone ?? "—"}</td>
                      <td>{n.http_addr}</td>
                      <td>{n.raft_addr}</td>
                      <td class="num">{n.leader_of.length}</td>
                      <td class="num">{replicas}</td>
                      <td>
                        {n.status !== "draining" && c.nodes.length > 1 && (
                          <ConfirmButton
                            label={`Drain node ${n.id}`}
                            name={String(n.id)}
                            what={`Move every replica off node ${n.id} and remove it from the cluster?`}
                            onConfirm={() => api.delete(`/v1/cluster/nodes/${n.id}`)}
                          />
                        )}
                      </td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <p class="note">
            Draining a node moves its replicas to the others, then removes it; the replica count above falls to 0 as it goes (replicas of
            internal topics such as <code>__audit</code> are not counted)
            {view.data?.count?.complete === false && `; counted over the first ${formatNumber(ALL_TOPICS_CAP)} topics`}.
          </p>
          <RebalancePlanView />
          <AddNode onDone={view.reload} />
        </>
      )}
    </>
  );
}

/** `before → after`, or one number when it does not change. */
function change(before: number, after: number) {
  return before === after ? String(before) : `${before} → ${after}`;
}

/**
 * The rebalance plan (`GET /v1/cluster/rebalance`, a dry run): each node's share of replicas and
 * preferred leaderships before and after, and the moves. Left out for a client that may not read
 * it (403), or a node that does not know it (404).
 */
function RebalancePlanView() {
  const plan = useLoad(() => api.get<RebalancePlan>("/v1/cluster/rebalance"), [], PLAN_REFRESH_MS);
  if (plan.error instanceof ApiError && (plan.error.status === 403 || plan.error.status === 404)) return null;
  const p = plan.data;
  const swaps = p ? p.moves.filter((m) => !m.copies_data).length : 0;
  return (
    <section class="panel" aria-label="Rebalance plan">
      <h2>Balance</h2>
      <ErrorText error={plan.error} />
      {p && (
        <>
          <p data-testid="rebalance-summary">
            {p.moves.length === 0
              ? "Balanced: a rebalance would move nothing."
              : `A rebalance would move ${p.moves.length - swaps} ${p.moves.length - swaps === 1 ? "replica" : "replicas"} and swap ${swaps} preferred ${swaps === 1 ? "leader" : "leaders"}.`}
            {p.moving > 0 && ` ${p.moving} ${p.moving === 1 ? "partition is" : "partitions are"} still copying to new replicas.`}
          </p>
          <div class="table-wrap">
            <table data-testid="rebalance-nodes">
              <thead>
                <tr>
                  <th scope="col">Node</th>
                  <th scope="col" class="num">Replicas</th>
                  <th scope="col" class="num">Preferred leader of</th>
                </tr>
              </thead>
              <tbody>
                {p.nodes.map((n) => (
                  <tr key={n.node_id}>
                    <td>{n.node_id}</td>
                    <td class="num">{change(n.replicas_before, n.replicas_after)}</td>
                    <td class="num">{change(n.leaders_before, n.leaders_after)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {p.moves.length > 0 && (
            <div class="table-wrap">
              <table data-testid="rebalance-moves">
                <thead>
                  <tr>
                    <th scope="col">Partition</th>
                    <th scope="col">Replicas now</th>
                    <th scope="col">After</th>
                    <th scope="col">Move</th>
                  </tr>
                </thead>
                <tbody>
                  {p.moves.slice(0, MOVES_SHOWN).map((m) => (
                    <tr key={`${m.topic}/${m.partition}`}>
                      <td>
                        <Link href={`/topics/${enc(m.topic)}`}>{m.topic}</Link> / {m.partition}
                      </td>
                      <td>{m.replicas_before.join(", ")}</td>
                      <td>{m.replicas_after.join(", ")}</td>
                      <td>{m.copies_data ? "copies data" : "leader swap"}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {p.moves.length > MOVES_SHOWN && <p class="note">and {formatNumber(p.moves.length - MOVES_SHOWN)} more moves.</p>}
          <p class="note">
            A dry run, refreshed every {PLAN_REFRESH_MS / 1000} s: nothing moves from here. Over every partition (internal topics too) and the nodes that are up
            and not draining; a replica list's first node is the preferred leader. Nodes rebalance on their own once they have been the same for a while
            (<code>rebalance.auto</code>), or with <code>herald cluster rebalance</code>.
          </p>
        </>
      )}
    </section>
  );
}

function AddNode({ onDone }: { onDone: () => void }) {
  const [nodeId, setNodeId] = useState("");
  const [httpAddr, setHttpAddr] = useState("");
  const [raftAddr, setRaftAddr] = useState("");
  const [busy, error, act, done] = useAction();
  return (
    <form
      class="panel"
      aria-label="Add a node"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          await api.post("/v1/cluster/nodes", { node_id: Number(nodeId), http_addr: httpAddr, raft_addr: raftAddr });
          onDone();
          return `node ${nodeId} added`;
        });
      }}
    >
      <h2>Add a node</h2>
      <p class="note">
        Start it first with <code>herald serve --join --node-id N …</code>; it then takes new replicas.
      </p>
      <div class="row">
        <Field label="Node id">{(id) => <input id={id} type="number" min={1} required value={nodeId} onInput={(e) => setNodeId(e.currentTarget.value)} />}</Field>
        <Field label="HTTP address">{(id) => <input id={id} required placeholder="127.0.0.1:8084" value={httpAddr} onInput={(e) => setHttpAddr(e.currentTarget.value)} />}</Field>
        <Field label="Raft address">{(id) => <input id={id} required placeholder="127.0.0.1:7004" value={raftAddr} onInput={(e) => setRaftAddr(e.currentTarget.value)} />}</Field>
      </div>
      <button type="submit" disabled={busy}>
        Add node
      </button>
      {done && <p role="status">{done}</p>}
      <ErrorText error={error} />
    </form>
  );
}
