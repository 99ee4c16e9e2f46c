import { useState } from "preact/hooks";
import { enc, type Message, type MessagePage, type Redrive, type Subscription, type Topic } from "../lib/api";
import { api } from "../lib/client";
import { formatDuration, formatNumber, formatTime } from "../lib/format";
import { ErrorText, Field, Link, Stat, useAction, useLoad } from "../components/ui";
import { MessageList } from "./messages";

const REFRESH_MS = 2000;
/** Dead letters shown: the newest this many of each dead-letter partition. */
const DEAD_LETTERS_SHOWN = 100;

export function Subscriptions() {
  const subs = useLoad(() => api.get<{ subscriptions: Subscription[] }>("/v1/subscriptions"), [], 5000);
  return (
    <>
      <h1>Subscriptions</h1>
      <ErrorText error={subs.error} />
      {subs.data && subs.data.subscriptions.length === 0 && <p>No subscriptions yet.</p>}
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Subscription</th>
              <th scope="col">Topic</th>
              <th scope="col">Ack deadline</th>
              <th scope="col">Dead letters to</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {(subs.data?.subscriptions ?? []).map((s) => (
              <tr key={s.name}>
                <td>
                  <Link href={`/subscriptions/${enc(s.name)}`}>{s.name}</Link>
                </td>
                <td>{s.topic}</td>
                <td>{formatDuration(s.ack_deadline_ms)}</td>
                <td>{s.dead_letter_policy ? `${s.dead_letter_policy.topic} after ${s.dead_letter_policy.max_delivery_attempts} attempts` : "none"}</td>
                <td>{formatTime(s.created_at_ms)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

export function SubscriptionDetail({ name }: { name: string }) {
  const sub = useLoad(() => api.get<Subscription>(`/v1/subscriptions/${enc(name)}`), [name], REFRESH_MS);
  const s = sub.data;
  return (
    <>
      <p class="crumbs">
        <Link href="/subscriptions">Subscriptions</Link> /
      </p>
      <h1>{name}</h1>
      <ErrorText error={sub.error} />
      {s && (
        <>
          <p>
            Reads <Link href={`/topics/${enc(s.topic)}`}>{s.topic}</Link> · ack deadline {formatDuration(s.ack_deadline_ms)} · retries after{" "}
            {formatDuration(s.retry_policy.min_backoff_ms)} up to {formatDuration(s.retry_policy.max_backoff_ms)} · ordering {s.ordering}
          </p>
          <div class="stats">
            <Stat label="Backlog" value={formatNumber(s.backlog)} testId="sub-backlog" />
            <Stat label="In flight" value={formatNumber(s.in_flight)} />
            <Stat label="Waiting to retry" value={formatNumber(s.delayed)} />
            <Stat label="Oldest unacked" value={s.oldest_unacked_age_seconds == null ? "–" : formatDuration(s.oldest_unacked_age_seconds * 1000)} />
            <Stat label="Dead-lettered" value={formatNumber(s.dead_lettered)} testId="sub-dead-lettered" />
          </div>
          {s.dead_letter_policy ? (
            <>
              <RedrivePanel sub={s} onChange={sub.reload} />
              <DeadLetters sub={name} topic={s.dead_letter_policy.topic} />
            </>
          ) : (
            <p>No dead-letter topic: messages are delivered until they are acked.</p>
          )}
        </>
      )}
    </>
  );
}

function RedrivePanel({ sub, onChange }: { sub: Subscription; onChange: () => void }) {
  const [rate, setRate] = useState("100");
  const [busy, error, act] = useAction();
  const job: Redrive | null | undefined = sub.redrive;
  const running = job?.state === "running";
  return (
    <section class="panel" aria-label="Redrive">
      <h2>Redrive dead letters</h2>
      <p>Republishes this subscription's dead letters to {sub.topic}, at a bounded rate, each once.</p>
      {job && (
        <p role="status" data-testid="redrive-state">
          Job {job.id}: <strong>{job.state}</strong>, {formatNumber(job.redriven)} redriven, {formatNumber(job.skipped)} skipped of {formatNumber(job.total)}{" "}
          (started {formatTime(job.started_at)}
          {job.finished_at ? `, finished ${formatTime(job.finished_at)}` : ""}){job.reason ? `: ${job.reason}` : ""}
          <progress max={Math.max(1, job.total)} value={job.redriven + job.skipped} aria-label="Redrive progress" />
        </p>
      )}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          act(async () => {
            await api.post(`/v1/subscriptions/${enc(sub.name)}/redrive`, { max_per_second: Number(rate) });
            onChange();
          });
        }}
      >
        <div class="row">
          <Field label="Messages per second">
            {(id) => <input id={id} type="number" min={1} max={10000} value={rate} onInput={(e) => setRate(e.currentTarget.value)} />}
          </Field>
        </div>
        <button type="submit" disabled={busy || running}>
          Redrive
        </button>{" "}
        {running && (
          <button
            type="button"
            onClick={() =>
              act(async () => {
                await api.delete(`/v1/subscriptions/${enc(sub.name)}/redrive`);
                onChange();
              })
            }
          >
            Cancel redrive
          </button>
        )}
      </form>
      <ErrorText error={error} />
    </section>
  );
}

/** The dead-letter topic's newest messages that came from this subscription. */
async function loadDeadLetters(sub: string, topic: string): Promise<Message[]> {
  const info = await api.get<Topic>(`/v1/topics/${enc(topic)}`);
  const found: Message[] = [];
  for (const p of info.partitions) {
    const from = Math.max(p.log_start_offset, p.high_watermark - DEAD_LETTERS_SHOWN);
    if (from >= p.high_watermark) continue;
    const page = await api.get<MessagePage>(`/v1/topics/${enc(topic)}/partitions/${p.partition}/messages?offset=${from}&max_messages=${DEAD_LETTERS_SHOWN}`);
    found.push(...page.messages.filter((m) => (m.headers?.["herald-dlq-subscription"] ?? sub) === sub));
  }
  return found.sort((a, b) => b.timestamp - a.timestamp);
}

function DeadLetters({ sub, topic }: { sub: string; topic: string }) {
  const letters = useLoad(() => loadDeadLetters(sub, topic), [sub, topic], 5000);
  return (
    <section aria-label="Dead letters">
      <h2>Dead letters</h2>
      <p class="note">
        The newest of <Link href={`/messages?topic=${enc(topic)}`}>{topic}</Link> from this subscription, with why each failed (headers{" "}
        <code>herald-dlq-reason</code>, <code>herald-dlq-attempts</code>, source offsets).
      </p>
      <ErrorText error={letters.error} />
      {letters.data && letters.data.length === 0 && <p>None.</p>}
      <MessageList messages={letters.data ?? []} testId="dead-letters" />
    </section>
  );
}
