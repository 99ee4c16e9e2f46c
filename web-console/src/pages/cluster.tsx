import { useState } from "preact/hooks";
import type { Cluster, Topic } from "../lib/api";
import { api } from "../lib/client";
import { ConfirmButton, ErrorText, Field, useAction, useLoad } from "../components/ui";

const REFRESH_MS = 2000;

interface ClusterView {
  cluster: Cluster;
  /** Partition replicas per node, over the topics `GET /v1/topics` lists (not internal ones). */
  replicas: Map<number, number>;
  topicsError?: unknown;
}

async function loadCluster(): Promise<ClusterView> {
  const cluster = await api.get<Cluster>("/v1/cluster");
  const replicas = new Map<number, number>();
  try {
    const { topics } = await api.get<{ topics: Topic[] }>("/v1/topics");
    for (const t of topics) for (const p of t.partitions) for (const r of p.replicas) replicas.set(r, (replicas.get(r) ?? 0) + 1);
    return { cluster, replicas };
  } catch (topicsError) {
    return { cluster, replicas, topicsError };
  }
}

export function ClusterPage() {
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
                  const replicas = view.data?.replicas.get(n.id) ?? 0;
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
            internal topics such as <code>__audit</code> are not counted).
          </p>
          <AddNode onDone={view.reload} />
        </>
      )}
    </>
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
