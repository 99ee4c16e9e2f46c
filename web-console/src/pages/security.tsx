import { useState } from "preact/hooks";
import { enc, type AuditEvent, type Client, type PolicyRule } from "../lib/api";
import { api } from "../lib/client";
import { formatTime } from "../lib/format";
import { ConfirmButton, ErrorText, Field, useAction, useLoad } from "../components/ui";

export function Security() {
  return (
    <>
      <h1>Security</h1>
      <p class="note">
        With authentication off (the loopback quick start) these settings are kept but not enforced. Reading and changing them needs admin rights on{" "}
        <code>auth:clients</code>, <code>auth:policies</code> and <code>audit:*</code>.
      </p>
      <Clients />
      <Policies />
      <Audit />
    </>
  );
}

function Clients() {
  const clients = useLoad(() => api.get<{ clients: Client[] }>("/v1/auth/clients"), []);
  const [clientId, setClientId] = useState("");
  const [roles, setRoles] = useState("viewer");
  const [secret, setSecret] = useState<{ client: string; secret: string } | undefined>(undefined);
  const [busy, error, act] = useAction();
  return (
    <section aria-label="Clients">
      <h2>OAuth2 clients</h2>
      <ErrorText error={clients.error} />
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Client</th>
              <th scope="col">Roles</th>
              <th scope="col">Created</th>
              <th scope="col">Secret set</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {(clients.data?.clients ?? []).map((c) => (
              <tr key={c.client_id}>
                <td>{c.client_id}</td>
                <td>{c.roles.join(", ")}</td>
                <td>{formatTime(c.created_at)}</td>
                <td>{formatTime(c.secret_rotated_at)}</td>
                <td class="actions">
                  <button
                    type="button"
                    onClick={() =>
                      act(async () => {
                        const answer = await api.post<{ client_secret: string }>(`/v1/auth/clients/${enc(c.client_id)}/secret`);
                        setSecret({ client: c.client_id, secret: answer.client_secret });
                        clients.reload();
                      })
                    }
                  >
                    Rotate secret
                  </button>{" "}
                  <ConfirmButton
                    label="Delete"
                    name={c.client_id}
                    what={`Delete client ${c.client_id}? Its tokens stop working at once.`}
                    onConfirm={async () => {
                      await api.delete(`/v1/auth/clients/${enc(c.client_id)}`);
                      clients.reload();
                    }}
                  />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {secret && (
        <div class="secret" role="status">
          <p>
            The secret of <strong>{secret.client}</strong>, shown once (the node keeps only its hash):
          </p>
          <pre>{secret.secret}</pre>
          <button type="button" onClick={() => setSecret(undefined)}>
            I have stored it
          </button>
        </div>
      )}
      <form
        class="panel"
        aria-label="Create a client"
        onSubmit={(event) => {
          event.preventDefault();
          act(async () => {
            const roleList = roles
              .split(",")
              .map((r) => r.trim())
              .filter(Boolean);
            const answer = await api.post<{ client_secret: string }>("/v1/auth/clients", { client_id: clientId, roles: roleList });
            setSecret({ client: clientId, secret: answer.client_secret });
            setClientId("");
            clients.reload();
          });
        }}
      >
        <h3>Create a client</h3>
        <div class="row">
          <Field label="Client id">{(id) => <input id={id} required value={clientId} onInput={(e) => setClientId(e.currentTarget.value)} />}</Field>
          <Field label="Roles (comma-separated)" hint="built in: admin, producer, consumer, viewer">
            {(id) => <input id={id} required value={roles} onInput={(e) => setRoles(e.currentTarget.value)} />}
          </Field>
        </div>
        <button type="submit" disabled={busy}>
          Create client
        </button>
      </form>
      <ErrorText error={error} />
    </section>
  );
}

function Policies() {
  const policy = useLoad(() => api.get<{ rules: PolicyRule[]; built_in: boolean }>("/v1/auth/policies"), []);
  const [editing, setEditing] = useState<string | undefined>(undefined);
  const [busy, error, act, done] = useAction();
  const rules = policy.data?.rules ?? [];
  return (
    <section aria-label="Policies">
      <h2>Policy</h2>
      <ErrorText error={policy.error} />
      {policy.data && <p class="note">{policy.data.built_in ? "The built-in policy (never changed)." : "A policy set by an administrator."}</p>}
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Role</th>
              <th scope="col">Action</th>
              <th scope="col">Resource</th>
            </tr>
          </thead>
          <tbody>
            {rules.map((r) => (
              <tr key={`${r.role} ${r.action} ${r.resource}`}>
                <td>{r.role}</td>
                <td>{r.action}</td>
                <td>
                  <code>{r.resource}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {editing === undefined ? (
        <button type="button" onClick={() => setEditing(JSON.stringify(rules, null, 2))} disabled={!policy.data}>
          Edit the policy
        </button>
      ) : (
        <form
          aria-label="Edit the policy"
          onSubmit={(event) => {
            event.preventDefault();
            act(async () => {
              await api.put("/v1/auth/policies", { rules: JSON.parse(editing) });
              setEditing(undefined);
              policy.reload();
              return "policy saved";
            });
          }}
        >
          <Field label="Rules (JSON: role, action, resource)" hint="replaces the whole policy">
            {(id) => <textarea id={id} rows={12} value={editing} onInput={(e) => setEditing(e.currentTarget.value)} />}
          </Field>
          <button type="submit" disabled={busy}>
            Save policy
          </button>{" "}
          <button type="button" onClick={() => setEditing(undefined)}>
            Cancel
          </button>
        </form>
      )}
      {done && <p role="status">{done}</p>}
      <ErrorText error={error} />
    </section>
  );
}

function Audit() {
  const [hours, setHours] = useState("1");
  const [principal, setPrincipal] = useState("");
  const [extra, setExtra] = useState<{ events: AuditEvent[]; next: number } | undefined>(undefined);
  const since = Date.now() - Number(hours) * 3600_000;
  // Later pages continue at the log position the last one ended at (`next_offset`), never at a
  // time: an event's time is its node's clock, and one node's clock ahead would skip events.
  const query = (fromOffset?: number) =>
    `/v1/audit?${fromOffset === undefined ? `since=${Math.max(0, Math.floor(since))}` : `from_offset=${fromOffset}`}&limit=100${principal ? `&principal=${enc(principal)}` : ""}`;
  const page = useLoad(
    async () => {
      setExtra(undefined);
      return api.get<{ events: AuditEvent[]; next_offset: number }>(query());
    },
    [hours, principal],
  );
  const [busy, error, act] = useAction();
  const events = [...(page.data?.events ?? []), ...(extra?.events ?? [])];
  const next = extra?.next ?? page.data?.next_offset;
  return (
    <section aria-label="Audit log">
      <h2>Audit log</h2>
      <div class="toolbar">
        <Field label="Since">
          {(id) => (
            <select id={id} value={hours} onChange={(e) => setHours(e.currentTarget.value)}>
              <option value="1">the last hour</option>
              <option value="24">the last day</option>
              <option value="168">the last week</option>
              <option value="100000">the beginning</option>
            </select>
          )}
        </Field>
        <Field label="Principal">{(id) => <input id={id} placeholder="anyone" value={principal} onChange={(e) => setPrincipal(e.currentTarget.value)} />}</Field>
      </div>
      <ErrorText error={page.error} />
      <div class="table-wrap">
        <table data-testid="audit-table">
          <thead>
            <tr>
              <th scope="col">Time</th>
              <th scope="col">Who</th>
              <th scope="col">Action</th>
              <th scope="col">Resource</th>
              <th scope="col">Result</th>
              <th scope="col">From</th>
            </tr>
          </thead>
          <tbody>
            {events.map((e) => (
              <tr key={e.request_id + e.at_ms}>
                <td>{formatTime(e.at_ms)}</td>
                <td>{e.principal}</td>
                <td>{e.action}</td>
                <td>{e.resource}</td>
                <td>
                  <span class={e.allowed ? "status status-up" : "status status-down"}>{e.allowed ? e.status : `refused ${e.status}`}</span>
                  {e.reason ? ` ${e.reason}` : ""}
                </td>
                <td>
                  {e.remote_addr ?? ""} (node {e.node_id})
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {page.data && (page.data.events.length === 100 || (extra && extra.events.length > 0)) && next !== undefined && (
        <button
          type="button"
          disabled={busy}
          onClick={() =>
            act(async () => {
              const more = await api.get<{ events: AuditEvent[]; next_offset: number }>(query(next));
              setExtra({ events: [...(extra?.events ?? []), ...more.events], next: more.next_offset });
            })
          }
        >
          Load more
        </button>
      )}
      <ErrorText error={error} />
    </section>
  );
}
