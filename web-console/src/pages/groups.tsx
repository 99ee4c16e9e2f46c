import { useState } from "preact/hooks";
import { enc, type Group, type GroupSummary, type MessagePage } from "../lib/api";
import { api } from "../lib/client";
import { formatDuration, formatNumber, formatTime } from "../lib/format";
import { navigate } from "../lib/router";
import { ConfirmButton, ErrorText, Field, Link, useAction, useLoad } from "../components/ui";

const REFRESH_MS = 2000;
/** Lag in seconds is worked out for at most this many lagging partitions per refresh. */
const AGE_LOOKUPS = 100;

export function Groups() {
  const groups = useLoad(() => api.get<{ groups: GroupSummary[] }>("/v1/groups"), [], REFRESH_MS);
  return (
    <>
      <h1>Consumer groups</h1>
      <ErrorText error={groups.error} />
      {groups.data && groups.data.groups.length === 0 && <p>No consumer groups yet.</p>}
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Group</th>
              <th scope="col">State</th>
              <th scope="col" class="num">Generation</th>
              <th scope="col" class="num">Members</th>
              <th scope="col" class="num">Lag (messages)</th>
            </tr>
          </thead>
          <tbody>
            {(groups.data?.groups ?? []).map((g) => (
              <tr key={g.group}>
                <td>
                  <Link href={`/groups/${enc(g.group)}`}>{g.group}</Link>
                </td>
                <td>{g.state}</td>
                <td class="num">{g.generation}</td>
                <td class="num">{g.members}</td>
                <td class="num">{formatNumber(g.lag)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

interface GroupView {
  group: Group;
  /** Per `topic:partition`: how long ago the oldest unconsumed message was produced, ms. */
  ages: Map<string, number>;
}

/**
 * Lag in seconds: the API gives lag in messages; the age of the first message after the
 * committed offset (read like any consumer would) says how far behind the group is in time.
 */
async function loadGroup(name: string): Promise<GroupView> {
  const group = await api.get<Group>(`/v1/groups/${enc(name)}`);
  const ages = new Map<string, number>();
  const lagging = group.offsets.filter((o) => o.committed !== null && (o.lag ?? 0) > 0).slice(0, AGE_LOOKUPS);
  await Promise.all(
    lagging.map(async (o) => {
      try {
        const page = await api.get<MessagePage>(`/v1/topics/${enc(o.topic)}/partitions/${o.partition}/messages?offset=${o.committed}&max_messages=1`);
        const first = page.messages[0];
        if (first) ages.set(`${o.topic}:${o.partition}`, Math.max(0, Date.now() - first.timestamp));
      } catch {
        // Below the log start (retention passed it) or no right to read: no age shown.
      }
    }),
  );
  return { group, ages };
}

export function GroupDetail({ name }: { name: string }) {
  const view = useLoad(() => loadGroup(name), [name], REFRESH_MS);
  const g = view.data?.group;
  const owner = new Map<string, string>();
  for (const m of g?.members ?? []) for (const a of m.assignments) owner.set(`${a.topic}:${a.partition}`, m.member_id);
  const totalLag = g?.offsets.reduce((sum, o) => sum + (o.lag ?? 0), 0) ?? 0;
  return (
    <>
      <p class="crumbs">
        <Link href="/groups">Consumer groups</Link> /
      </p>
      <h1>{name}</h1>
      <ErrorText error={view.error} />
      {g && (
        <>
          <p>
            State <strong data-testid="group-state">{g.state}</strong> · generation {g.generation} · {g.members.length} members · total lag{" "}
            <strong data-testid="group-lag">{formatNumber(totalLag)}</strong> messages · new members start at {g.auto_offset_reset}
          </p>
          <h2>Offsets and lag</h2>
          <div class="table-wrap">
            <table data-testid="group-offsets">
              <thead>
                <tr>
                  <th scope="col">Topic</th>
                  <th scope="col" class="num">Partition</th>
                  <th scope="col" class="num">Committed</th>
                  <th scope="col" class="num">High watermark</th>
                  <th scope="col" class="num">Lag (messages)</th>
                  <th scope="col" class="num">Lag (time)</th>
                  <th scope="col">Member</th>
                </tr>
              </thead>
              <tbody>
                {g.offsets.map((o) => {
                  const key = `${o.topic}:${o.partition}`;
                  const age = view.data?.ages.get(key);
                  return (
                    <tr key={key}>
                      <td>{o.topic}</td>
                      <td class="num">{o.partition}</td>
                      <td class="num">{o.committed === null ? "none" : formatNumber(o.committed)}</td>
                      <td class="num">{formatNumber(o.high_watermark)}</td>
                      <td class="num" data-testid={`lag-${key}`}>
                        {formatNumber(o.lag)}
                      </td>
                      <td class="num">{o.lag === 0 ? "0 s" : age === undefined ? "–" : formatDuration(age)}</td>
                      <td>{owner.get(key) ?? ""}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <p class="note">
            Lag in time: how long ago the first message after the committed offset was produced (read from the partition; the API gives lag in
            messages). A partition without a committed offset has no lag yet: the group starts it at {g.auto_offset_reset}.
          </p>
          <h2>Members</h2>
          {g.members.length === 0 && <p>No members: the group is empty.</p>}
          <ul class="members">
            {g.members.map((m) => (
              <li key={m.member_id}>
                <strong>{m.member_id}</strong> joined {formatTime(m.joined_at)}, session {formatDuration(m.session_timeout_ms)}, topics{" "}
                {m.topics.join(", ")}; partitions {m.assignments.map((a) => `${a.topic}:${a.partition}`).join(", ") || "none"}
              </li>
            ))}
          </ul>
          <div class="columns">
            <ResetOffsets group={g} onDone={view.reload} />
            <section class="panel" aria-label="Delete group">
              <h2>Delete</h2>
              <p>Only an empty group (no members) can be deleted; its committed offsets are lost.</p>
              <ConfirmButton
                label="Delete group"
                name={name}
                what={`Delete consumer group ${name} and its committed offsets?`}
                onConfirm={async () => {
                  await api.delete(`/v1/groups/${enc(name)}`);
                  navigate("/groups");
                }}
              />
            </section>
          </div>
        </>
      )}
    </>
  );
}

function ResetOffsets({ group, onDone }: { group: Group; onDone: () => void }) {
  const [to, setTo] = useState("earliest");
  const [value, setValue] = useState("");
  const topics = [...new Set(group.offsets.map((o) => o.topic))];
  const [topic, setTopic] = useState("");
  const [busy, error, act, done] = useAction();
  const empty = group.members.length === 0;
  return (
    <form
      class="panel"
      aria-label="Reset offsets"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          const body: Record<string, unknown> = { to };
          if (to === "offset") body.offset = Number(value);
          if (to === "timestamp") body.timestamp = Date.parse(value.endsWith("Z") ? value : `${value}Z`);
          if (topic) body.topics = [topic];
          await api.post(`/v1/groups/${enc(group.group)}/offsets/reset`, body);
          onDone();
          return "offsets reset";
        });
      }}
    >
      <h2>Reset offsets</h2>
      {!empty && <p class="note">Only while the group is empty: stop its consumers first.</p>}
      <Field label="To">
        {(id) => (
          <select id={id} value={to} onChange={(e) => setTo(e.currentTarget.value)}>
            <option value="earliest">earliest</option>
            <option value="latest">latest</option>
            <option value="timestamp">a time</option>
            <option value="offset">an offset</option>
          </select>
        )}
      </Field>
      {to === "offset" && <Field label="Offset">{(id) => <input id={id} type="number" min={0} required value={value} onInput={(e) => setValue(e.currentTarget.value)} />}</Field>}
      {to === "timestamp" && (
        <Field label="Time (UTC)">{(id) => <input id={id} type="datetime-local" step="1" required value={value} onInput={(e) => setValue(e.currentTarget.value)} />}</Field>
      )}
      <Field label="Topics">
        {(id) => (
          <select id={id} value={topic} onChange={(e) => setTopic(e.currentTarget.value)}>
            <option value="">all of the group's topics</option>
            {topics.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        )}
      </Field>
      <button type="submit" disabled={busy || !empty}>
        Reset offsets
      </button>
      {done && <p role="status">{done}</p>}
      <ErrorText error={error} />
    </form>
  );
}
