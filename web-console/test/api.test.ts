import { describe, expect, it } from "vitest";
import { Api, ApiError } from "../src/lib/api";

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
    const api = new Api({ fetch: fetcher, storage, now: () => 1_000_000 });
    const session = await api.signIn("admin", "s3cret");
    expect(session).toEqual({ token: "tok-1", clientId: "admin", expiresAtMs: 1_000_000 + 3_600_000 });
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
    const api = new Api({ fetch: fetcher, storage, now: () => now });
    let changes = 0;
    api.subscribe(() => changes++);
    await api.signIn("c", "s");
    expect(api.current).not.toBeNull();
    await expect(api.get("/v1/cluster")).rejects.toThrow(ApiError);
    expect(api.current).toBeNull();
    expect(storage.items.size).toBe(0);
    expect(changes).toBe(2);

    const { fetcher: again } = fakeFetch([json(200, { access_token: "tok2", expires_in: 60 })]);
    const later = new Api({ fetch: again, now: () => now });
    await later.signIn("c", "s");
    now = 61_000;
    expect(later.current).toBeNull();
  });

  it("restores a stored session that has not expired", () => {
    const storage = memoryStorage();
    storage.setItem("herald-console-session", JSON.stringify({ token: "t", clientId: "c", expiresAtMs: 5000 }));
    expect(new Api({ storage, now: () => 1000 }).current?.token).toBe("t");
    expect(new Api({ storage, now: () => 6000 }).current).toBeNull();
  });

  it("builds the WebSocket URL with the token as access_token", async () => {
    const { fetcher } = fakeFetch([json(200, { access_token: "a b", expires_in: 60 })]);
    const api = new Api({ fetch: fetcher });
    expect(api.webSocketUrl({ protocol: "http:", host: "127.0.0.1:8080" })).toBe("ws://127.0.0.1:8080/v1/ws");
    await api.signIn("c", "s");
    expect(api.webSocketUrl({ protocol: "https:", host: "h" })).toBe("wss://h/v1/ws?access_token=a%20b");
  });
});
