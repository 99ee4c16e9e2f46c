import { useEffect, useRef, useState } from "preact/hooks";
import type { Cluster } from "../lib/api";
import { api } from "../lib/client";
import { formatNumber, formatRate } from "../lib/format";
import { isInternal, parseMetrics, rate, total, type Scrape } from "../lib/metrics";
import { ErrorText, Link, Stat, useLoad } from "../components/ui";

const REFRESH_MS = 2000;

interface Rates {
  produced?: number;
  consumed?: number;
  producedBytes?: number;
  consumedBytes?: number;
}

/** Scrapes /metrics every REFRESH_MS; the latest scrape and the rates since the one before. */
export function useMetrics(): { scrape?: Scrape; previous?: Scrape; error: unknown } {
  const [state, setState] = useState<{ scrape?: Scrape; previous?: Scrape; error: unknown }>({ error: undefined });
  const last = useRef<Scrape | undefined>(undefined);
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout>;
    const run = async () => {
      try {
        const text = await api.metrics();
        const scrape = { atMs: Date.now(), samples: parseMetrics(text) };
        if (!live) return;
        setState({ scrape, previous: last.current, error: undefined });
        last.current = scrape;
      } catch (error) {
        if (live) setState((s) => ({ ...s, error }));
      }
      if (live) timer = setTimeout(run, REFRESH_MS);
    };
    run();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, []);
  return state;
}

const userTopic = (labels: Record<string, string>) => !isInternal(labels.topic ?? "");

export function Overview() {
  const cluster = useLoad(() => api.get<Cluster>("/v1/cluster"), [], REFRESH_MS);
  const { scrape, previous, error: metricsError } = useMetrics();
  const rates: Rates = scrape
    ? {
        produced: rate(previous, scrape, "herald_produced_messages_total", userTopic),
        consumed: rate(previous, scrape, "herald_consumed_messages_total", userTopic),
        producedBytes: rate(previous, scrape, "herald_produced_bytes_total", userTopic),
        consumedBytes: rate(previous, scrape, "herald_consumed_bytes_total", userTopic),
      }
    : {};
  const samples = scrape?.samples ?? [];
  const nodes = cluster.data?.nodes ?? [];
  const up = nodes.filter((n) => n.status === "up").length;
  return (
    <>
      <h1>Overview</h1>
      <ErrorText error={cluster.error} />
      <div class="stats">
        <Stat label="Nodes up" value={cluster.data ? `${up} of ${nodes.length}` : "–"} testId="nodes-up" />
        <Stat label="Metadata leader" value={cluster.data?.metadata_leader != null ? `node ${cluster.data.metadata_leader}` : "none known"} />
        <Stat label="Partitions led (this node)" value={formatNumber(total(samples, "herald_cluster_partitions_led"))} />
        <Stat label="Under-replicated partitions" value={formatNumber(total(samples, "herald_cluster_under_replicated_partitions"))} testId="under-replicated" />
        <Stat label="Produced" value={<span data-testid="produce-rate">{formatRate(rates.produced)}</span>} />
        <Stat label="Consumed" value={<span data-testid="consume-rate">{formatRate(rates.consumed)}</span>} />
        <Stat label="Produced bytes" value={formatRate(rates.producedBytes).replace("/s", " B/s")} />
        <Stat label="Consumed bytes" value={formatRate(rates.consumedBytes).replace("/s", " B/s")} />
      </div>
      <p class="note">
        Rates are this node's, from its <code>/metrics</code>, refreshed every {REFRESH_MS / 1000} s; messages of internal topics (
        <code>__audit</code>) are left out. Total produced since the node started:{" "}
        <span data-testid="produced-total">{formatNumber(total(samples, "herald_produced_messages_total", userTopic) ?? 0)}</span>.
      </p>
      {metricsError ? <p class="note">Metrics are not readable with this sign-in: {String(metricsError)}</p> : null}
      <h2>Nodes</h2>
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Node</th>
              <th scope="col">Status</th>
              <th scope="col">HTTP</th>
              <th scope="col">Raft</th>
              <th scope="col">Partitions led</th>
            </tr>
          </thead>
          <tbody>
            {nodes.map((node) => (
              <tr key={node.id}>
                <td>
                  {node.id}
                  {cluster.data?.metadata_leader === node.id && <span class="badge">metadata leader</span>}
                </td>
                <td>
                  <span class={`status status-${node.status}`}>{node.status}</span>
                </td>
                <td>{node.http_addr}</td>
                <td>{node.raft_addr}</td>
                <td>{node.leader_of.length}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <p>
        <Link href="/cluster">Manage nodes</Link> · <Link href="/topics">Topics</Link>
      </p>
    </>
  );
}
