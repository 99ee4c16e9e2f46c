import { afterEach, describe, expect, it, vi } from "vitest";
import { Api, ApiError, RENEW_RETRY_MS } from "../src/lib/api";

interface Call {
  url: string;
  init: RequestInit;
}

/** A fetch that answers from a list, recording what was asked. */
function fakeFetch(answers: Response[]) {
  const calls: Call[] = [];
  const fetcher = (async (url: string, init: RequestInit) => {
    calls.push({ url, init });
    const answer = answers.shift();
    if (!answer) throw new Error(`unexpected request ${url}`);
    return answer;
  }) as unknown as typeof fetch;
  return { calls, fetcher };
}

/** The ApiError a call is refused with (fails when it is not refused so). */
async function refusal(call: Promise<unknown>): Promise<ApiError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiError);
  return error as ApiError;
}

const json = (status: number, body: unknown, type = "application/json") => new Response(JSON.stringify(body), { status, headers: { "content-type": type } });

function memoryStorage() {
  const items = new Map<string, string>();
  return {
    items,
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => void items.set(k, v),
    removeItem: (k: string) => void items.delete(k),
  };
}

describe("Api", () => {
  it("sends JSON and reads JSON; 204 is undefined", async () => {
    const { calls, fetcher } = fakeFetch([json(201, { name: "orders" }), new Response(null, { status: 204 })]);
    const api = new Api({ fetch: fetcher });
    expect(await api.post("/v1/topics", { name: "orders" })).toEqual({ name: "orders" });
    expect(calls[0].init.method).toBe("POST");
    expect((calls[0].init.headers as Record<string, string>)["content-type"]).toBe("application/json");
    expect(calls[0].init.body).toBe('{"name":"orders"}');
    expect(await api.delete("/v1/topics/orders")).toBeUndefined();
  });

  it("throws problem+json answers as ApiError with their code", async () => {
    const problem = { type: "urn:herald:problem:topic_exists", title: "Topic exists", status: 409, detail: "topic orders exists", code: "topic_exists" };
    const { fetcher } = fakeFetch([json(409, problem, "application/problem+json")]);
    const error = await refusal(new Api({ fetch: fetcher }).post("/v1/topics", { name: "orders" }));
    expect(error.status).toBe(409);
    expect(error.code).toBe("topic_exists");
    expect(error.message).toBe("topic orders exists (topic_exists)");
  });

  it("exchanges client credentials for a token, keeping the token and never the secret", async () => {
    const storage = memoryStorage();
    const { calls, fetcher } = fakeFetch([json(200, { access_token: "tok-1", token_type: "Bearer", expires_in: 3600 }), json(200, { topics: [] })]);
    const api = new Api({ fetch: fetcher, storage, now: () => 1_000_000, autoRenew: false });
    const session = await api.signIn("admin", "s3cret");
    expect(session).toEqual({ token: "tok-1", clientId: "admin", expiresAtMs: 1_000_000 + 3_600_000, lifetimeMs: 3_600_000 });
    expect(calls[0].url).toBe("/oauth/token");
    expect((calls[0].init.headers as Record<string, string>)["content-type"]).toBe("application/x-www-form-urlencoded");
    expect(new URLSearchParams(String(calls[0].init.body)).get("grant_type")).toBe("client_credentials");

    await api.get("/v1/topics");
    expect((calls[1].init.headers as Record<string, string>).authorization).toBe("Bearer tok-1");
    const stored = [...storage.items.values()].join("");
    expect(stored).toContain("tok-1");
    expect(stored).not.toContain("s3cret");
  });

  it("reports a refused sign-in with the OAuth error", async () => {
    const { fetcher } = fakeFetch([json(401, { error: "invalid_client", error_description: "unknown client or wrong secret" })]);
    const error = await refusal(new Api({ fetch: fetcher }).signIn("admin", "wrong"));
    expect(error.code).toBe("invalid_client");
  });

  it("drops an expired session and one the node refuses", async () => {
    let now = 0;
    const storage = memoryStorage();
    const { fetcher } = fakeFetch([
      json(200, { access_token: "tok", expires_in: 60 }),
      json(401, { code: "unauthorized", detail: "token expired", status: 401 }, "application/problem+json"),
    ]);
    const api = new Api({ fetch: fetcher, storage, now: () => now, autoRenew: false });
    let changes = 0;
    api.subscribe(() => changes++);
    await api.signIn("c", "s");
    expect(api.current).not.toBeNull();
    await expect(api.get("/v1/cluster")).rejects.toThrow(ApiError);
    expect(api.current).toBeNull();
    expect(storage.items.size).toBe(0);
    expect(changes).toBe(2);

    const { fetcher: again } = fakeFetch([json(200, { access_token: "tok2", expires_in: 60 })]);
    const later = new Api({ fetch: again, now: () => now, autoRenew: false });
    await later.signIn("c", "s");
    now = 61_000;
    expect(later.current).toBeNull();
  });

  it("restores a stored session that has not expired", () => {
    const storage = memoryStorage();
    storage.setItem("herald-console-session", JSON.stringify({ token: "t", clientId: "c", expiresAtMs: 5000 }));
    expect(new Api({ storage, now: () => 1000, autoRenew: false }).current?.token).toBe("t");
    expect(new Api({ storage, now: () => 6000, autoRenew: false }).current).toBeNull();
  });

  it("builds the WebSocket URL with the token as access_token", async () => {
    const { fetcher } = fakeFetch([json(200, { access_token: "a b", expires_in: 60 })]);
    const api = new Api({ fetch: fetcher, autoRenew: false });
    expect(api.webSocketUrl({ protocol: "http:", host: "127.0.0.1:8080" })).toBe("ws://127.0.0.1:8080/v1/ws");
    await api.signIn("c", "s");
    expect(api.webSocketUrl({ protocol: "https:", host: "h" })).toBe("wss://h/v1/ws?access_token=a%20b");
  });

  describe("renewal", () => {
    afterEach(() => {
      vi.useRealTimers();
    });

    it("renews the token by token exchange once 80% of its life passed, never sending the secret", async () => {
      vi.useFakeTimers();
      const storage = memoryStorage();
      const { calls, fetcher } = fakeFetch([
        json(200, { access_token: "tok-1", expires_in: 100 }),
        json(200, { access_token: "tok-2", expires_in: 100, issued_token_type: "urn:ietf:params:oauth:token-type:access_token" }),
      ]);
      const api = new Api({ fetch: fetcher, storage, now: () => Date.now() });
      await api.signIn("console", "s3cret");
      await vi.advanceTimersByTimeAsync(79_000);
      expect(calls.length).toBe(1);
      await vi.advanceTimersByTimeAsync(1_000);
      expect(calls.length).toBe(2);
      const form = new URLSearchParams(String(calls[1].init.body));
      expect(form.get("grant_type")).toBe("urn:ietf:params:oauth:grant-type:token-exchange");
      expect(form.get("subject_token")).toBe("tok-1");
      expect(form.get("subject_token_type")).toBe("urn:ietf:params:oauth:token-type:access_token");
      expect(String(calls[1].init.body)).not.toContain("s3cret");
      expect(api.current?.token).toBe("tok-2");
      expect(api.current?.clientId).toBe("console");
      expect([...storage.items.values()].join("")).toContain("tok-2");
      expect(api.renewalRefused).toBeNull();
    });

    it("asks for the secret when the node refuses, and retries when it is unreachable", async () => {
      vi.useFakeTimers();
      let down = true;
      const calls: string[] = [];
      const fetcher = (async (_url: string, init: RequestInit) => {
        const form = new URLSearchParams(String(init.body));
        calls.push(form.get("grant_type") ?? "");
        if (form.get("grant_type") === "client_credentials") return json(200, { access_token: "tok-1", expires_in: 100 });
        if (down) throw new TypeError("Failed to fetch");
        return json(400, { error: "invalid_grant", error_description: "the client's secret was rotated" });
      }) as unknown as typeof fetch;
      const api = new Api({ fetch: fetcher, now: () => Date.now() });
      let changes = 0;
      api.subscribe(() => changes++);
      await api.signIn("console", "s");
      await vi.advanceTimersByTimeAsync(80_000);
      expect(calls.length).toBe(2);
      expect(api.renewalRefused).toBeNull();
      down = false;
      await vi.advanceTimersByTimeAsync(RENEW_RETRY_MS);
      expect(calls.length).toBe(3);
      expect(api.renewalRefused).toBe("the client's secret was rotated");
      expect(api.current?.token).toBe("tok-1");
      expect(changes).toBe(2);
      // Nothing more is tried; signing in again clears the refusal.
      await vi.advanceTimersByTimeAsync(15_000);
      expect(calls.length).toBe(3);
    });
  });
});
