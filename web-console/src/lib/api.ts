// The console's client of the node's HTTP API (docs: /docs, openapi/herald.json). Same origin:
// the console is served by the node it manages. With authentication on, it holds an access token
// from /oauth/token; the client secret typed at sign-in is sent once and never kept. The token is
// renewed before it expires by exchanging it for its successor (RFC 8693 token exchange), which
// the node grants until the session is older than its max_session_ms or the client's secret was
// rotated; then the page asks for the secret again.
import type { DecodedSchema } from "./schemas";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
  ) {
    super(detail ? `${detail} (${code || status})` : `HTTP ${status}${code ? ` ${code}` : ""}`);
  }
}

export interface Session {
  token: string;
  clientId: string;
  /** Epoch ms at which the token stops being accepted. */
  expiresAtMs: number;
  /** How long the token lasts from its issue (ms): it is renewed when RENEW_AT_SHARE of it passed. */
  lifetimeMs?: number;
}

/** Renew a token once this share of its lifetime has passed. */
export const RENEW_AT_SHARE = 0.8;
/** A renewal that failed for a reason other than a refusal (the node unreachable) is tried again this much later. */
export const RENEW_RETRY_MS = 10_000;
const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";

export interface ApiOptions {
  /** Prefix of every URL (empty: same origin). */
  base?: string;
  fetch?: typeof fetch;
  /** Where the session survives a reload of the tab (sessionStorage); null: nowhere. */
  storage?: Pick<Storage, "getItem" | "setItem" | "removeItem"> | null;
  now?: () => number;
  /** Renew the token before it expires (default true). */
  autoRenew?: boolean;
}

const SESSION_KEY = "herald-console-session";

export class Api {
  private readonly base: string;
  private readonly fetcher: typeof fetch;
  private readonly storage: ApiOptions["storage"];
  readonly now: () => number;
  private session: Session | null = null;
  private readonly listeners = new Set<() => void>();
  private readonly autoRenew: boolean;
  private renewTimer: ReturnType<typeof setTimeout> | null = null;
  /** Why the node refused to renew the session's token (the secret is needed again), or null. */
  renewalRefused: string | null = null;

  constructor(options: ApiOptions = {}) {
    this.base = options.base ?? "";
    this.fetcher = options.fetch ?? ((input, init) => fetch(input, init));
    this.storage = options.storage ?? null;
    this.now = options.now ?? (() => Date.now());
    this.autoRenew = options.autoRenew ?? true;
    const saved = this.storage?.getItem(SESSION_KEY);
    if (saved) {
      try {
        const session = JSON.parse(saved) as Session;
        if (session.expiresAtMs > this.now()) {
          this.session = session;
          this.scheduleRenewal();
        }
      } catch {
        this.storage?.removeItem(SESSION_KEY);
      }
    }
  }

  /** The current session, if signed in with a token that has not expired. */
  get current(): Session | null {
    if (this.session && this.session.expiresAtMs <= this.now()) this.setSession(null);
    return this.session;
  }

  /** Called when the session changes (signed in, renewed, signed out, expired, refused). */
  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private setSession(session: Session | null) {
    this.session = session;
    this.renewalRefused = null;
    if (session) this.storage?.setItem(SESSION_KEY, JSON.stringify(session));
    else this.storage?.removeItem(SESSION_KEY);
    this.scheduleRenewal();
    this.notify();
  }

  private notify() {
    for (const listener of this.listeners) listener();
  }

  /** Exchanges client credentials for a token (client credentials grant); keeps only the token. */
  signIn(clientId: string, clientSecret: string): Promise<Session> {
    return this.grant(new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }), clientId);
  }

  /** Exchanges the session's token for its successor (token exchange), without the secret. */
  renew(): Promise<Session> {
    const session = this.current;
    if (!session) return Promise.reject(new ApiError(401, "", "not signed in"));
    const form = new URLSearchParams({ grant_type: TOKEN_EXCHANGE, subject_token: session.token, subject_token_type: ACCESS_TOKEN_TYPE });
    return this.grant(form, session.clientId);
  }

  private scheduleRenewal() {
    if (this.renewTimer !== null) clearTimeout(this.renewTimer);
    this.renewTimer = null;
    const session = this.session;
    if (!session || !this.autoRenew) return;
    // A session restored from before renewal existed has no lifetime: renew it at once.
    const lifetimeMs = session.lifetimeMs ?? 0;
    const renewAtMs = session.expiresAtMs - lifetimeMs * (1 - RENEW_AT_SHARE);
    this.renewTimer = setTimeout(() => void this.renewNow(), Math.max(0, renewAtMs - this.now()));
  }

  private async renewNow() {
    this.renewTimer = null;
    try {
      await this.renew();
    } catch (error) {
      if (error instanceof ApiError && error.status === 400) {
        // The node will not renew this session (secret rotated, session too old): ask for the secret.
        this.renewalRefused = error.detail;
        this.notify();
      } else if (this.current) {
        this.renewTimer = setTimeout(() => void this.renewNow(), RENEW_RETRY_MS);
      }
    }
  }

  /** One token request; the token it answers becomes the session. */
  private async grant(form: URLSearchParams, clientId: string): Promise<Session> {
    const response = await this.fetcher(`${this.base}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: form.toString(),
    });
    const body = await readJson(response);
    if (!response.ok) {
      const error = (body as { error?: string; error_description?: string } | undefined) ?? {};
      throw new ApiError(response.status, error.error ?? "", error.error_description ?? response.statusText);
    }
    const { access_token, expires_in } = body as { access_token: string; expires_in: number };
    const session = { token: access_token, clientId, expiresAtMs: this.now() + expires_in * 1000, lifetimeMs: expires_in * 1000 };
    this.setSession(session);
    return session;
  }

  signOut() {
    this.setSession(null);
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    const session = this.current;
    return session ? { ...extra, authorization: `Bearer ${session.token}` } : extra;
  }

  /** One JSON request; a problem+json answer is thrown as ApiError. 204 is undefined. */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const init: RequestInit = { method, headers: this.headers(body === undefined ? {} : { "content-type": "application/json" }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    const response = await this.fetcher(`${this.base}${path}`, init);
    return this.answer<T>(response);
  }

  private async answer<T>(response: Response): Promise<T> {
    if (response.status === 204) return undefined as T;
    const body = await readJson(response);
    if (!response.ok) {
      const problem = (body ?? {}) as { code?: string; detail?: string; title?: string };
      if (response.status === 401 && this.session) this.setSession(null);
      throw new ApiError(response.status, problem.code ?? "", problem.detail ?? problem.title ?? response.statusText);
    }
    return body as T;
  }

  get<T>(path: string) {
    return this.request<T>("GET", path);
  }
  post<T>(path: string, body?: unknown) {
    return this.request<T>("POST", path, body ?? {});
  }
  put<T>(path: string, body: unknown) {
    return this.request<T>("PUT", path, body);
  }
  patch<T>(path: string, body: unknown) {
    return this.request<T>("PATCH", path, body);
  }
  delete<T = void>(path: string) {
    return this.request<T>("DELETE", path);
  }

  /** GET /metrics as text (Prometheus exposition). */
  async metrics(): Promise<string> {
    const response = await this.fetcher(`${this.base}/metrics`, { headers: this.headers() });
    if (!response.ok) {
      const problem = ((await readJson(response)) ?? {}) as { code?: string; detail?: string };
      throw new ApiError(response.status, problem.code ?? "", problem.detail ?? response.statusText);
    }
    return response.text();
  }

  /** The WebSocket API's URL for a page loaded from `location`, with the token when signed in. */
  webSocketUrl(location: { protocol: string; host: string }): string {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const session = this.current;
    const query = session ? `?access_token=${encodeURIComponent(session.token)}` : "";
    return `${scheme}//${location.host}${this.base}/v1/ws${query}`;
  }
}

async function readJson(response: Response): Promise<unknown> {
  const text = await response.text();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return { detail: text.slice(0, 200) };
  }
}

export const enc = encodeURIComponent;

// What the API answers (the subset the console reads).

export interface PartitionInfo {
  partition: number;
  leader: number | null;
  replicas: number[];
  in_sync: number[];
  log_start_offset: number;
  high_watermark: number;
}

export interface TopicConfig {
  retention_ms: number;
  retention_bytes: number;
  cleanup_policy: string;
  max_message_bytes: number;
  compression: string;
  /** The subjects the topic's keys and values follow (only when set). */
  key_subject?: string | null;
  value_subject?: string | null;
  [key: string]: unknown;
}

export interface Topic {
  name: string;
  partitions: PartitionInfo[];
  replication_factor: number;
  config: TopicConfig;
}

export interface Message {
  topic: string;
  partition: number;
  offset: number;
  timestamp: number;
  key?: string | null;
  key_b64?: string | null;
  value?: unknown;
  value_b64?: string;
  headers: Record<string, string>;
  /** With `decode=json`: a wire-format key decoded, and the schema it was decoded with. */
  key_json?: unknown;
  key_schema?: DecodedSchema | null;
  /** With `decode=json`: the schema `value` was decoded with. */
  value_schema?: DecodedSchema | null;
  /** With `decode=json`: why the value (or key) kept its bytes. */
  decode_error?: string | null;
}

export interface MessagePage {
  messages: Message[];
  next_offset: number;
  high_watermark: number;
  log_start_offset: number;
}

export interface ClusterNode {
  id: number;
  http_addr: string;
  raft_addr: string;
  status: string;
  leader_of: { topic: string; partition: number }[];
  /** The failure domain the node named (`zone`); replicas spread over zones. */
  zone?: string | null;
}

export interface Cluster {
  cluster_id: string;
  nodes: ClusterNode[];
  metadata_leader: number | null;
}

/** `GET /v1/cluster/rebalance`: what a rebalance would move now (a dry run). */
export interface RebalancePlan {
  /** Zone fixes first, then replica moves, then preferred-leader swaps. */
  moves: { topic: string; partition: number; replicas_before: number[]; replicas_after: number[]; copies_data: boolean }[];
  nodes: { node_id: number; replicas_before: number; replicas_after: number; leaders_before: number; leaders_after: number }[];
  /** Partitions still copying to new replicas from earlier steps. */
  moving: number;
  started: boolean;
}

export interface GroupSummary {
  group: string;
  state: string;
  generation: number;
  members: number;
  lag: number | null;
}

export interface Group {
  group: string;
  state: string;
  generation: number;
  auto_offset_reset: string;
  members: { member_id: string; topics: string[]; session_timeout_ms: number; joined_at: number; assignments: { topic: string; partition: number }[] }[];
  /** `committed` and `lag` are null until the group commits an offset for the partition. */
  offsets: { topic: string; partition: number; committed: number | null; high_watermark: number; lag: number | null }[];
}

export interface Redrive {
  id: number;
  state: string;
  dead_letter_topic: string;
  redriven: number;
  skipped: number;
  total: number;
  max_per_second: number;
  started_at: number;
  finished_at?: number | null;
  reason?: string | null;
}

export interface Subscription {
  name: string;
  topic: string;
  ack_deadline_ms: number;
  retry_policy: { min_backoff_ms: number; max_backoff_ms: number };
  dead_letter_policy?: { topic: string; max_delivery_attempts: number } | null;
  start: string;
  ordering: string;
  created_at_ms: number;
  backlog?: number | null;
  in_flight?: number | null;
  delayed?: number | null;
  dead_lettered?: number | null;
  oldest_unacked_age_seconds?: number | null;
  redrive?: Redrive | null;
}

export interface Client {
  client_id: string;
  roles: string[];
  created_at: number;
  secret_rotated_at: number;
}

export interface PolicyRule {
  role: string;
  resource: string;
  action: string;
}

export interface AuditEvent {
  at_ms: number;
  principal: string;
  action: string;
  method: string;
  path: string;
  resource: string;
  allowed: boolean;
  status: number;
  reason?: string | null;
  remote_addr?: string | null;
  request_id: string;
  node_id: number;
}
