import { describe, expect, it } from "vitest";
import type { Topic } from "../src/lib/api";
import {
  firstPage,
  listAllTopics,
  nextPage,
  pageSummary,
  previousPage,
  restorePager,
  topicsPath,
  type TopicList,
} from "../src/lib/topics";

const topic = (name: string): Topic => ({
  name,
  partitions: [],
  replication_factor: 1,
  config: { retention_ms: -1, retention_bytes: -1, cleanup_policy: "delete", max_message_bytes: 1, compression: "none" },
});

/** A node holding `names` (sorted), answering pages as `GET /v1/topics` does. */
function fakeNode(names: string[]) {
  const paths: string[] = [];
  const get = async <T>(path: string): Promise<T> => {
    paths.push(path);
    const url = new URL(path, "http://node");
    const limit = Number(url.searchParams.get("limit"));
    const token = url.searchParams.get("page_token");
    const prefix = url.searchParams.get("prefix") ?? "";
    const after = token ? atob(token) : undefined;
    const matching = names.filter((n) => n.startsWith(prefix) && (after === undefined || n > after));
    const page = matching.slice(0, limit);
    const answer: TopicList = { topics: page.map(topic) };
    if (matching.length > limit) answer.next_page_token = btoa(page[page.length - 1]);
    return answer as T;
  };
  return { paths, api: { get } as never };
}

describe("topicsPath", () => {
  it("asks for a page with its token and prefix, escaped, the limit within 1 to 1000", () => {
    expect(topicsPath({ limit: 100 })).toBe("/v1/topics?limit=100");
    expect(topicsPath({ limit: 10, pageToken: "b3Jk+/", prefix: "orders.eu" })).toBe("/v1/topics?limit=10&page_token=b3Jk%2B%2F&prefix=orders.eu");
    expect(topicsPath({ limit: 5000 })).toBe("/v1/topics?limit=1000");
    expect(topicsPath({ limit: 0 })).toBe("/v1/topics?limit=100");
    expect(topicsPath({ limit: -3 })).toBe("/v1/topics?limit=1");
  });
});

describe("listAllTopics", () => {
  const names = Array.from({ length: 2500 }, (_, i) => `t-${String(i).padStart(4, "0")}`);

  it("follows page tokens a thousand at a time", async () => {
    const { paths, api } = fakeNode(names);
    const all = await listAllTopics(api);
    expect(all.topics.map((t) => t.name)).toEqual(names);
    expect(all.complete).toBe(true);
    expect(all.pages).toBe(3);
    expect(paths[0]).toBe("/v1/topics?limit=1000");
    expect(paths[1]).toMatch(/^\/v1\/topics\?limit=1000&page_token=/);
  });

  it("stops at the cap and says the list is not complete", async () => {
    const { paths, api } = fakeNode(names);
    const some = await listAllTopics(api, { cap: 1500 });
    expect(some.topics.length).toBe(1500);
    expect(some.complete).toBe(false);
    expect(paths[1]).toMatch(/^\/v1\/topics\?limit=500&/);
    const exact = await listAllTopics(fakeNode(names).api, { cap: 2500 });
    expect(exact.topics.length).toBe(2500);
    expect(exact.complete).toBe(true);
  });

  it("keeps to a prefix", async () => {
    const all = await listAllTopics(fakeNode(names).api, { prefix: "t-00" });
    expect(all.topics.length).toBe(100);
  });
});

describe("the topics page's pager", () => {
  it("goes forward with the next token and back with the stack of the earlier ones", () => {
    let pager = firstPage(10, "orders");
    expect(pager.token).toBeUndefined();
    expect(previousPage(pager)).toEqual(pager);
    pager = nextPage(pager, "A");
    pager = nextPage(pager, "B");
    expect(pager).toEqual({ limit: 10, prefix: "orders", token: "B", before: ["", "A"] });
    pager = previousPage(pager);
    expect(pager).toEqual({ limit: 10, prefix: "orders", token: "A", before: [""] });
    pager = previousPage(pager);
    expect(pager).toEqual({ limit: 10, prefix: "orders", token: undefined, before: [] });
  });

  it("restores a pager from history state, or starts at the first page", () => {
    const saved = nextPage(firstPage(25, "x"), "T");
    expect(restorePager(JSON.parse(JSON.stringify(saved)))).toEqual(saved);
    expect(restorePager(null)).toEqual(firstPage());
    expect(restorePager({ limit: 7, prefix: "", before: [] })).toEqual(firstPage());
    expect(restorePager({ limit: 10, prefix: "", before: [1] })).toEqual(firstPage());
  });

  it("says which topics a page shows and whether more follow", () => {
    expect(pageSummary(firstPage(10), 0, false)).toBe("No topics yet");
    expect(pageSummary(firstPage(10, "zz"), 0, false)).toBe('No topics start with "zz"');
    expect(pageSummary(firstPage(10), 1, false)).toBe("1 topic");
    expect(pageSummary(firstPage(10), 7, false)).toBe("7 topics");
    expect(pageSummary(firstPage(10), 10, true)).toBe("Page 1 · topics 1–10 · more follow");
    const second = nextPage(firstPage(10, "p-"), "T");
    expect(pageSummary(second, 3, false)).toBe('Page 2 · topics 11–13 starting with "p-" · last page');
    expect(pageSummary(second, 0, false)).toBe('Page 2 · no more topics starting with "p-"');
  });
});
