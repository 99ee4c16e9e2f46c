import { useEffect, useState } from "preact/hooks";
import { enc, type Topic } from "../lib/api";
import { api } from "../lib/client";
import { formatBytes, formatDuration, formatNumber, formatRate } from "../lib/format";
import { ratesByLabel } from "../lib/metrics";
import { navigate } from "../lib/router";
import { firstPage, listTopics, nextPage, pageSummary, previousPage, restorePager, topicsPath, TOPIC_PAGE_SIZES, type Pager } from "../lib/topics";
import { ConfirmButton, ErrorText, Field, Link, useAction, useLoad } from "../components/ui";
import { useMetrics } from "./overview";

/** Messages a topic holds now: over its partitions, high watermark minus log start. */
export function messageCount(topic: Topic): number {
  return topic.partitions.reduce((sum, p) => sum + Math.max(0, p.high_watermark - p.log_start_offset), 0);
}

export function Topics() {
  // Where the operator was (page, size, prefix) survives going to a topic and back, and a reload.
  const [pager, setPager] = useState<Pager>(() => restorePager(history.state?.topics));
  useEffect(() => {
    history.replaceState({ ...(history.state ?? {}), topics: pager }, "");
  }, [pager]);
  const query = { limit: pager.limit, pageToken: pager.token, prefix: pager.prefix };
  const key = topicsPath(query);
  const topics = useLoad(async () => ({ key, page: await listTopics(api, query) }), [key], 5000);
  const { scrape, previous } = useMetrics();
  const rates = scrape ? ratesByLabel(previous, scrape, "herald_produced_messages_total", "topic") : new Map<string, number>();
  // The rows of the page asked for; while another loads, the last one's stay (marked busy).
  const loaded = topics.data?.key === key ? topics.data.page : undefined;
  const shown = topics.data?.page.topics ?? [];
  const nextToken = loaded?.next_page_token ?? undefined;
  return (
    <>
      <h1>Topics</h1>
      <CreateTopic onCreated={(name) => navigate(`/topics/${enc(name)}`)} />
      <div class="toolbar">
        <Field label="Name starts with">
          {(id) => <input id={id} type="search" value={pager.prefix} onInput={(e) => setPager(firstPage(pager.limit, e.currentTarget.value))} />}
        </Field>
        <Field label="Per page">
          {(id) => (
            <select id={id} value={String(pager.limit)} onChange={(e) => setPager(firstPage(Number(e.currentTarget.value), pager.prefix))}>
              {TOPIC_PAGE_SIZES.map((size) => (
                <option key={size} value={String(size)}>
                  {size}
                </option>
              ))}
            </select>
          )}
        </Field>
        <span class="note" data-testid="topic-count" aria-live="polite">
          {loaded ? pageSummary(pager, loaded.topics.length, nextToken !== undefined) : "loading…"}
        </span>
      </div>
      <ErrorText error={topics.error} />
      <div class="table-wrap">
        <table data-testid="topics-table" aria-busy={loaded ? "false" : "true"}>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="num">Partitions</th>
              <th scope="col" class="num">Replicas</th>
              <th scope="col" class="num">Messages</th>
              <th scope="col" class="num">Produce rate</th>
              <th scope="col">Retention</th>
              <th scope="col">Cleanup</th>
              <th scope="col">Compression</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((topic) => (
              <tr key={topic.name}>
                <td>
                  <Link href={`/topics/${enc(topic.name)}`}>{topic.name}</Link>
                </td>
                <td class="num">{topic.partitions.length}</td>
                <td class="num">{topic.replication_factor}</td>
                <td class="num">{formatNumber(messageCount(topic))}</td>
                <td class="num">{formatRate(rates.get(topic.name) ?? (previous ? 0 : undefined))}</td>
                <td>
                  {formatDuration(topic.config.retention_ms)}
                  {topic.config.retention_bytes >= 0 && ` / ${formatBytes(topic.config.retention_bytes)}`}
                </td>
                <td>{topic.config.cleanup_policy}</td>
                <td>{topic.config.compression}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <nav class="pager" aria-label="Topic pages">
        <button type="button" disabled={pager.before.length === 0} onClick={() => setPager(previousPage(pager))}>
          Previous
        </button>
        <button type="button" disabled={nextToken === undefined} onClick={() => nextToken !== undefined && setPager(nextPage(pager, nextToken))}>
          Next
        </button>
      </nav>
      <p class="note">
        Topics in name order, a page at a time. Messages: what the partitions hold now (high watermark minus log start). Produce rate: this node's
        metrics.
      </p>
    </>
  );
}

function CreateTopic(props: { onCreated: (name: string) => void }) {
  const [name, setName] = useState("");
  const [partitions, setPartitions] = useState("1");
  // Empty: the cluster's default_replication_factor, capped at its nodes.
  const [replication, setReplication] = useState("");
  const [busy, error, act] = useAction();
  return (
    <details class="panel">
      <summary>Create a topic</summary>
      <form
        aria-label="Create a topic"
        onSubmit={(event) => {
          event.preventDefault();
          act(async () => {
            const body: Record<string, unknown> = { name, partitions: Number(partitions) };
            if (replication !== "") body.replication_factor = Number(replication);
            await api.post("/v1/topics", body);
            props.onCreated(name);
          });
        }}
      >
        <div class="row">
          <Field label="Name">{(id) => <input id={id} required pattern="[A-Za-z0-9._\-]{1,249}" value={name} onInput={(e) => setName(e.currentTarget.value)} />}</Field>
          <Field label="Partitions">
            {(id) => <input id={id} type="number" min={1} max={1024} required value={partitions} onInput={(e) => setPartitions(e.currentTarget.value)} />}
          </Field>
          <Field label="Replication factor">
            {(id) => <input id={id} type="number" min={1} placeholder="cluster default" value={replication} onInput={(e) => setReplication(e.currentTarget.value)} />}
          </Field>
        </div>
        <button type="submit" disabled={busy}>
          Create topic
        </button>
        <ErrorText error={error} />
      </form>
    </details>
  );
}

export function TopicDetail({ name }: { name: string }) {
  const topic = useLoad(() => api.get<Topic>(`/v1/topics/${enc(name)}`), [name], 3000);
  const t = topic.data;
  return (
    <>
      <p class="crumbs">
        <Link href="/topics">Topics</Link> /
      </p>
      <h1>{name}</h1>
      <ErrorText error={topic.error} />
      {t && (
        <>
          <p>
            <Link href={`/messages?topic=${enc(name)}`}>Browse messages</Link> · {t.partitions.length} partitions · replication factor{" "}
            {t.replication_factor} · {formatNumber(messageCount(t))} messages
          </p>
          <h2>Partitions</h2>
          <div class="table-wrap">
            <table data-testid="partitions-table">
              <thead>
                <tr>
                  <th scope="col" class="num">Partition</th>
                  <th scope="col">Leader</th>
                  <th scope="col">Replicas</th>
                  <th scope="col">In sync</th>
                  <th scope="col" class="num">Log start</th>
                  <th scope="col" class="num">High watermark</th>
                </tr>
              </thead>
              <tbody>
                {t.partitions.map((p) => (
                  <tr key={p.partition}>
                    <td class="num">{p.partition}</td>
                    <td>{p.leader ?? <span class="status status-down">none</span>}</td>
                    <td>{p.replicas.join(", ")}</td>
                    <td>
                      {p.in_sync.join(", ")}
                      {p.in_sync.length < p.replicas.length && <span class="badge warn">under-replicated</span>}
                    </td>
                    <td class="num">{formatNumber(p.log_start_offset)}</td>
                    <td class="num">{formatNumber(p.high_watermark)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <div class="columns">
            <GrowPartitions topic={t} onDone={topic.reload} />
            <Configure topic={t} onDone={topic.reload} />
          </div>
          <h2>Delete</h2>
          <p>Deleting a topic removes its messages on every node; it cannot be undone.</p>
          <ConfirmButton
            label="Delete topic"
            name={name}
            what={`Delete topic ${name} and all its messages?`}
            onConfirm={async () => {
              await api.delete(`/v1/topics/${enc(name)}`);
              navigate("/topics");
            }}
          />
        </>
      )}
    </>
  );
}

function GrowPartitions({ topic, onDone }: { topic: Topic; onDone: () => void }) {
  const [count, setCount] = useState(String(topic.partitions.length + 1));
  const [busy, error, act, done] = useAction();
  return (
    <form
      class="panel"
      aria-label="Grow partitions"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          await api.patch(`/v1/topics/${enc(topic.name)}`, { partitions: Number(count) });
          onDone();
          return `now ${count} partitions`;
        });
      }}
    >
      <h2>Grow partitions</h2>
      <p class="note">Partitions only grow. Keys map to partitions by their count: a key's new messages may go to another partition.</p>
      <Field label="Partitions">
        {(id) => <input id={id} type="number" min={topic.partitions.length + 1} max={1024} required value={count} onInput={(e) => setCount(e.currentTarget.value)} />}
      </Field>
      <button type="submit" disabled={busy}>
        Grow
      </button>
      {done && <p role="status">{done}</p>}
      <ErrorText error={error} />
    </form>
  );
}

function Configure({ topic, onDone }: { topic: Topic; onDone: () => void }) {
  const [retentionMs, setRetentionMs] = useState(String(topic.config.retention_ms));
  const [retentionBytes, setRetentionBytes] = useState(String(topic.config.retention_bytes));
  const [cleanup, setCleanup] = useState(topic.config.cleanup_policy);
  const [compression, setCompression] = useState(topic.config.compression);
  const [busy, error, act, done] = useAction();
  return (
    <form
      class="panel"
      aria-label="Configure"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          await api.patch(`/v1/topics/${enc(topic.name)}`, {
            config: { retention_ms: Number(retentionMs), retention_bytes: Number(retentionBytes), cleanup_policy: cleanup, compression },
          });
          onDone();
          return "saved";
        });
      }}
    >
      <h2>Configuration</h2>
      <Field label="Retention (ms)" hint={`${formatDuration(Number(retentionMs))}; -1 keeps messages forever`}>
        {(id) => <input id={id} type="number" min={-1} required value={retentionMs} onInput={(e) => setRetentionMs(e.currentTarget.value)} />}
      </Field>
      <Field label="Retention bytes per partition" hint={`${formatBytes(Number(retentionBytes))}; -1 is unlimited`}>
        {(id) => <input id={id} type="number" min={-1} required value={retentionBytes} onInput={(e) => setRetentionBytes(e.currentTarget.value)} />}
      </Field>
      <Field label="Cleanup policy">
        {(id) => (
          <select id={id} value={cleanup} onChange={(e) => setCleanup(e.currentTarget.value)}>
            <option value="delete">delete</option>
            <option value="compact">compact</option>
            <option value="compact,delete">compact,delete</option>
          </select>
        )}
      </Field>
      <Field label="Compression">
        {(id) => (
          <select id={id} value={compression} onChange={(e) => setCompression(e.currentTarget.value)}>
            <option value="none">none</option>
            <option value="lz4">lz4</option>
            <option value="zstd">zstd</option>
          </select>
        )}
      </Field>
      <button type="submit" disabled={busy}>
        Save configuration
      </button>
      {done && <p role="status">{done}</p>}
      <ErrorText error={error} />
    </form>
  );
}
