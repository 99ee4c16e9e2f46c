// How long the web console takes to show the topic list of a node with many topics: creates
// TOPICS topics (default 1000; those that exist are kept), then loads /console/topics in
// chromium RUNS times, each in a fresh browser context (cold cache), and prints the time from
// navigation start to the list's first page rendered (100 topics, the console's page size),
// and the console's bytes on the wire.
//
//   HERALD_URL=http://127.0.0.1:8080 TOPICS=1000 node console-load-time.mjs
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.HERALD_URL;
assert.ok(base, "HERALD_URL must be set");
const topics = Number(process.env.TOPICS ?? 1000);
const runs = Number(process.env.RUNS ?? 5);
const WAIT_MS = 60_000;
/** The topics page shows this many topics a page unless told otherwise. */
const PAGE = 100;

/** Every topic's name, a page of 1000 at a time. */
async function topicNames() {
  const names = [];
  let token;
  do {
    const page = await (await fetch(`${base}/v1/topics?limit=1000${token ? `&page_token=${token}` : ""}`)).json();
    names.push(...page.topics.map((t) => t.name));
    token = page.next_page_token;
  } while (token);
  return names;
}

const existing = new Set(await topicNames());
const names = Array.from({ length: topics }, (_, i) => `load-${String(i).padStart(4, "0")}`).filter((n) => !existing.has(n));
// A few at a time: topic creation is a metadata raft write each.
for (let i = 0; i < names.length; i += 8) {
  await Promise.all(
    names.slice(i, i + 8).map(async (name) => {
      const answer = await fetch(`${base}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, partitions: 1 }) });
      assert.ok(answer.status === 201 || answer.status === 409, `create ${name}: ${answer.status}`);
    }),
  );
}
const total = (await topicNames()).length;
assert.ok(total >= topics, `the node has ${total} topics`);

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const times = [];
let transferred = 0;
try {
  for (let run = 0; run < runs; run++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    await page.goto(`${base}/console/topics`, { timeout: WAIT_MS });
    await page.waitForFunction(
      (want) => document.querySelector("[data-testid=topics-table]")?.getAttribute("aria-busy") === "false" && document.querySelectorAll("[data-testid=topics-table] tbody tr").length === want,
      Math.min(total, PAGE),
      { timeout: WAIT_MS, polling: "raf" },
    );
    times.push(await page.evaluate(() => performance.now()));
    transferred = await page.evaluate(() =>
      performance
        .getEntriesByType("resource")
        .concat(performance.getEntriesByType("navigation"))
        .filter((e) => e.name.includes("/console/"))
        .reduce((sum, e) => sum + e.transferSize, 0),
    );
    await context.close();
  }
} finally {
  await browser.close();
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
console.log(`topics: ${total}; time to the topic list's first page rendered (ms, navigation start to its ${Math.min(total, PAGE)} rows shown), ${runs} cold loads: median ${median.toFixed(0)}, min ${times[0].toFixed(0)}, max ${times[times.length - 1].toFixed(0)}`);
console.log(`console files transferred on a cold load: ${transferred} bytes (page, script, stylesheet; not compressed by the node)`);
