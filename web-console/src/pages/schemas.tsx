import { useState } from "preact/hooks";
import { ApiError, enc } from "../lib/api";
import { api } from "../lib/client";
import { diffLines, diffStats, sideBySide, splitLines } from "../lib/diff";
import { formatNumber } from "../lib/format";
import { navigate } from "../lib/router";
import { ALL_TOPICS_CAP, listAllTopics } from "../lib/topics";
import {
  COMPATIBILITY_LEVELS,
  REGISTRY,
  defaultPair,
  prettySchema,
  schemaType,
  subjectUses,
  type SubjectUse,
  type SubjectVersion,
} from "../lib/schemas";
import { ConfirmButton, ErrorText, Field, Link, useAction, useLoad } from "../components/ui";

interface SubjectSummary {
  subject: string;
  /** Soft-deleted: listed only with `deleted=true`. */
  deleted: boolean;
  latest?: SubjectVersion;
  compatibility?: string;
  error?: unknown;
}

interface Level {
  compatibilityLevel: string;
}

/**
 * Every subject with its latest version and compatibility level. Only requests that succeed
 * for a subject that exists: a soft-deleted one is read with `deleted=true`.
 */
async function loadSubjects(withDeleted: boolean): Promise<SubjectSummary[]> {
  const live = await api.get<string[]>(`${REGISTRY}/subjects`);
  const all = withDeleted ? await api.get<string[]>(`${REGISTRY}/subjects?deleted=true`) : live;
  const isLive = new Set(live);
  return Promise.all(
    all.map(async (subject): Promise<SubjectSummary> => {
      const deleted = !isLive.has(subject);
      try {
        const [latest, level] = await Promise.all([
          api.get<SubjectVersion>(`${REGISTRY}/subjects/${enc(subject)}/versions/latest${deleted ? "?deleted=true" : ""}`),
          api.get<Level>(`${REGISTRY}/config/${enc(subject)}?defaultToGlobal=true`),
        ]);
        return { subject, deleted, latest, compatibility: level.compatibilityLevel };
      } catch (error) {
        return { subject, deleted, error };
      }
    }),
  );
}

/** Where the topics a subject is used by were not all read (more than ALL_TOPICS_CAP). */
function PartialTopics({ complete }: { complete: boolean | undefined }) {
  if (complete !== false) return null;
  return <p class="note">The topics using a subject are looked for among the first {formatNumber(ALL_TOPICS_CAP)} topics only.</p>;
}

function UsedBy({ uses }: { uses: SubjectUse[] | undefined }) {
  if (!uses || uses.length === 0) return <span class="note">no topic</span>;
  return (
    <>
      {uses.map((use, i) => (
        <span key={`${use.topic} ${use.as}`}>
          {i > 0 && ", "}
          <Link href={`/topics/${enc(use.topic)}`}>{use.topic}</Link> <span class="note">({use.as})</span>
        </span>
      ))}
    </>
  );
}

export function Schemas() {
  const [filter, setFilter] = useState("");
  const [showDeleted, setShowDeleted] = useState(false);
  const subjects = useLoad(() => loadSubjects(showDeleted), [showDeleted]);
  const registry = useLoad(() => api.get<Level>(`${REGISTRY}/config`), []);
  const topics = useLoad(() => listAllTopics(api), []);
  const uses = subjectUses(topics.data?.topics ?? []);
  const all = subjects.data ?? [];
  const shown = all.filter((s) => s.subject.includes(filter)).sort((a, b) => a.subject.localeCompare(b.subject));
  return (
    <>
      <h1>Schemas</h1>
      <p class="note">
        The subjects of the cluster's schema registry (Confluent's API at <code>/schema-registry</code>). A subject without its own compatibility level follows
        the registry's:{" "}
        <strong data-testid="registry-compatibility">{registry.data?.compatibilityLevel ?? "–"}</strong>.
      </p>
      <div class="toolbar">
        <Field label="Filter by name">
          {(id) => <input id={id} type="search" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} />}
        </Field>
        <label class="check">
          <input type="checkbox" checked={showDeleted} onChange={(e) => setShowDeleted(e.currentTarget.checked)} /> Deleted subjects
        </label>
        <span class="note" data-testid="subject-count">
          {subjects.data ? `${shown.length} of ${all.length} subjects` : "loading…"}
        </span>
      </div>
      <ErrorText error={subjects.error} />
      <ErrorText error={registry.error} />
      <ErrorText error={topics.error} />
      <PartialTopics complete={topics.data?.complete} />
      {subjects.data && all.length === 0 ? (
        <NoSubjects />
      ) : (
        <div class="table-wrap">
          <table data-testid="subjects-table">
            <thead>
              <tr>
                <th scope="col">Subject</th>
                <th scope="col" class="num">Latest version</th>
                <th scope="col">Type</th>
                <th scope="col">Compatibility</th>
                <th scope="col">Used by</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((s) => (
                <tr key={s.subject}>
                  <td>
                    <Link href={`/schemas/${enc(s.subject)}`}>{s.subject}</Link>
                    {s.deleted && <span class="badge warn">deleted</span>}
                  </td>
                  {s.error ? (
                    <td colSpan={3} class="error">
                      {s.error instanceof Error ? s.error.message : String(s.error)}
                    </td>
                  ) : (
                    <>
                      <td class="num">{s.latest ? `v${s.latest.version}` : "–"}</td>
                      <td>{s.latest ? schemaType(s.latest) : "–"}</td>
                      <td>{s.compatibility ?? "–"}</td>
                    </>
                  )}
                  <td>
                    <UsedBy uses={uses.get(s.subject)} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {all.length > 0 && (
        <p class="note">Used by: the topics whose config names the subject as their key_subject or value_subject (what produce validates against).</p>
      )}
    </>
  );
}

function NoSubjects() {
  const origin = typeof location === "undefined" ? "http://127.0.0.1:8080" : location.origin;
  return (
    <section class="panel" aria-label="No subjects" data-testid="no-subjects">
      <h2>No subjects yet</h2>
      <p>
        Confluent's serializers register their schema on first use (give them <code>url={origin}/schema-registry</code>). To register one by hand:
      </p>
      <pre class="value">
        {`curl -X POST ${origin}/schema-registry/subjects/orders-value/versions \\
  -H 'content-type: application/json' \\
  -d '{"schema": "{\\"type\\":\\"record\\",\\"name\\":\\"Order\\",\\"fields\\":[{\\"name\\":\\"id\\",\\"type\\":\\"string\\"}]}"}'`}
      </pre>
      <p>
        Add <code>-H "authorization: Bearer $TOKEN"</code> when the node has authentication on, and <code>"schemaType": "JSON"</code> or{" "}
        <code>"PROTOBUF"</code> for other kinds of schema. A topic follows the subject once its config names it:
      </p>
      <pre class="value">
        {`curl -X PATCH ${origin}/v1/topics/orders -H 'content-type: application/json' \\
  -d '{"config": {"value_subject": "orders-value"}}'`}
      </pre>
    </section>
  );
}

interface Versions {
  /** Every version, soft-deleted ones too, oldest first. */
  all: number[];
  live: Set<number>;
  /** The whole subject is soft-deleted. */
  deleted: boolean;
}

async function loadVersions(subject: string): Promise<Versions> {
  const [all, liveSubjects] = await Promise.all([
    api.get<number[]>(`${REGISTRY}/subjects/${enc(subject)}/versions?deleted=true`),
    api.get<string[]>(`${REGISTRY}/subjects`),
  ]);
  const deleted = !liveSubjects.includes(subject);
  const live = deleted ? [] : await api.get<number[]>(`${REGISTRY}/subjects/${enc(subject)}/versions`);
  return { all: [...all].sort((a, b) => a - b), live: new Set(live), deleted };
}

export function SchemaDetail({ name }: { name: string }) {
  const versions = useLoad(() => loadVersions(name), [name]);
  const topics = useLoad(() => listAllTopics(api), []);
  const uses = subjectUses(topics.data?.topics ?? []).get(name);
  const v = versions.data;
  const latest = v && v.all.length > 0 ? v.all[v.all.length - 1] : undefined;
  return (
    <>
      <p class="crumbs">
        <Link href="/schemas">Schemas</Link> /
      </p>
      <h1>
        {name}
        {v?.deleted && <span class="badge warn">deleted</span>}
      </h1>
      <ErrorText error={versions.error} />
      {v && latest !== undefined && (
        <>
          <p data-testid="subject-summary">
            {v.all.length} {v.all.length === 1 ? "version" : "versions"} · latest v{latest} · used by <UsedBy uses={uses} />
          </p>
          <ErrorText error={topics.error} />
          <PartialTopics complete={topics.data?.complete} />
          <Compare key={name} subject={name} versions={v} />
          <div class="columns">
            <Compatibility subject={name} />
            {!v.deleted && (
              <section class="panel" aria-label="Delete subject">
                <h2>Delete</h2>
                <p class="note">
                  A soft delete: the subject's versions leave the listings (they show under <em>Deleted subjects</em>), their ids still resolve so old
                  messages still decode. Refused (<code>schema_referenced</code>) while another live schema references one of them.
                </p>
                <ConfirmButton
                  label="Delete subject"
                  name={name}
                  what={`Soft-delete subject ${name} and all its versions?`}
                  onConfirm={async () => {
                    await api.delete<number[]>(`${REGISTRY}/subjects/${enc(name)}`);
                    navigate("/schemas");
                  }}
                />
              </section>
            )}
          </div>
        </>
      )}
    </>
  );
}

function versionLabel(version: number, versions: Versions) {
  return versions.deleted || versions.live.has(version) ? `v${version}` : `v${version} (deleted)`;
}

/** Two versions side by side, with their line diff. */
function Compare({ subject, versions }: { subject: string; versions: Versions }) {
  const [first, second] = defaultPair(versions.all)!;
  const [left, setLeft] = useState(first);
  const [right, setRight] = useState(second);
  const read = (version: number) => api.get<SubjectVersion>(`${REGISTRY}/subjects/${enc(subject)}/versions/${version}?deleted=true`);
  const pair = useLoad(() => Promise.all([read(left), read(right)]), [subject, left, right]);
  const select = (label: string, value: number, set: (v: number) => void) => (
    <Field label={label}>
      {(id) => (
        <select id={id} value={String(value)} onChange={(e) => set(Number(e.currentTarget.value))}>
          {versions.all.map((n) => (
            <option key={n} value={String(n)}>
              {versionLabel(n, versions)}
            </option>
          ))}
        </select>
      )}
    </Field>
  );
  const shown = pair.data && pair.data[0].version === left && pair.data[1].version === right ? pair.data : undefined;
  return (
    <section class="panel" aria-label="Compare versions">
      <h2>Versions</h2>
      <div class="row">
        {select("Left version", left, setLeft)}
        {select("Right version", right, setRight)}
      </div>
      <ErrorText error={pair.error} />
      {shown ? <SchemaDiff left={shown[0]} right={shown[1]} /> : !pair.error && <p class="note">loading…</p>}
    </section>
  );
}

function SchemaDiff({ left, right }: { left: SubjectVersion; right: SubjectVersion }) {
  const lines = diffLines(splitLines(prettySchema(left.schema, schemaType(left))), splitLines(prettySchema(right.schema, schemaType(right))));
  const rows = sideBySide(lines);
  const { added, deleted } = diffStats(lines);
  const title = (s: SubjectVersion) => `v${s.version} · id ${s.id} · ${schemaType(s)}`;
  return (
    <>
      <p class="note" role="status" data-testid="diff-stats">
        {left.version === right.version
          ? `v${left.version}, id ${left.id}`
          : added + deleted === 0
            ? `v${left.version} and v${right.version}: the same text`
            : `v${left.version} → v${right.version}: ${added} ${added === 1 ? "line" : "lines"} added, ${deleted} deleted`}
      </p>
      <div class="table-wrap">
        <table class="diff" data-testid="schema-diff">
          <thead>
            <tr>
              <th scope="colgroup" colSpan={2}>
                {title(left)}
              </th>
              <th scope="colgroup" colSpan={2}>
                {title(right)}
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((row, i) => (
              <tr key={i}>
                <td class="ln">{row.left && `${row.left.changed ? "−" : ""}${row.left.line}`}</td>
                <td class={`code${row.left?.changed ? " diff-del" : ""}`}>{row.left?.text}</td>
                <td class="ln">{row.right && `${row.right.changed ? "+" : ""}${row.right.line}`}</td>
                <td class={`code${row.right?.changed ? " diff-add" : ""}`}>{row.right?.text}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div class="columns">
        <References of={left} />
        <References of={right} />
      </div>
    </>
  );
}

function References({ of }: { of: SubjectVersion }) {
  const refs = of.references ?? [];
  return (
    <div data-testid={`references-v${of.version}`}>
      <h3>References of v{of.version}</h3>
      {refs.length === 0 ? (
        <p class="note">none</p>
      ) : (
        <ul>
          {refs.map((r) => (
            <li key={r.name}>
              <code>{r.name}</code>: <Link href={`/schemas/${enc(r.subject)}`}>{r.subject}</Link> v{r.version}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

function Compatibility({ subject }: { subject: string }) {
  const level = useLoad(() => api.get<Level>(`${REGISTRY}/config/${enc(subject)}?defaultToGlobal=true`), [subject]);
  const [wanted, setWanted] = useState<string | undefined>(undefined);
  const [busy, error, act, done] = useAction();
  const current = level.data?.compatibilityLevel;
  const choice = wanted ?? current ?? "BACKWARD";
  return (
    <form
      class="panel"
      aria-label="Compatibility"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          const answer = await api.put<{ compatibility: string }>(`${REGISTRY}/config/${enc(subject)}`, { compatibility: choice });
          level.reload();
          return `compatibility set to ${answer.compatibility}`;
        });
      }}
    >
      <h2>Compatibility</h2>
      <p>
        New versions are checked against earlier ones at level <strong data-testid="subject-compatibility">{current ?? "–"}</strong> (the subject's own, else
        the registry's).
      </p>
      <ErrorText error={level.error} />
      <Field label="Compatibility level" hint={`needs the admin right on subject:${subject}`}>
        {(id) => (
          <select id={id} value={choice} onChange={(e) => setWanted(e.currentTarget.value)}>
            {COMPATIBILITY_LEVELS.map((l) => (
              <option key={l} value={l}>
                {l}
              </option>
            ))}
          </select>
        )}
      </Field>
      <button type="submit" disabled={busy}>
        Set compatibility
      </button>
      {done && <p role="status">{done}</p>}
      {error instanceof ApiError && error.status === 403 && <p class="note">Only a client with the admin right on this subject can change its level.</p>}
      <ErrorText error={error} />
    </form>
  );
}
