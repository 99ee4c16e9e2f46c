// Opens the example page (/examples/) in Debian's chromium against a running node, produces with
// plain HTTP from outside the browser, and checks that the messages arrive over both the
// WebSocket and EventSource, in order, and that a WebSocket reconnect resumes without a gap or a
// repeat. Run by tests/it/ui/browser_examples.rs, which starts the node and creates the topic:
//
//   HERALD_URL=http://127.0.0.1:8080 HERALD_TOPIC=orders node examples.test.mjs
//
// Exits non-zero with the reason on the first failed check. Every wait has a deadline.
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.HERALD_URL;
const topic = process.env.HERALD_TOPIC;
assert.ok(base && topic, "HERALD_URL and HERALD_TOPIC must be set");
const WAIT_MS = 20_000;

async function produce(values) {
  const answer = await fetch(`${base}/v1/topics/${topic}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: values.map((value) => ({ value })) }),
  });
  assert.equal(answer.status, 200, `produce answered ${answer.status}: ${await answer.text()}`);
}

/** The `partition:offset value` of every message a stream's list shows, in order. */
function shown(page, stream) {
  return page.$$eval(`#${stream}-messages li`, (items) => items.map((item) => item.textContent));
}

async function waitForCount(page, stream, count) {
  await page.waitForFunction(
    ([stream, count]) => document.querySelectorAll(`#${stream}-messages li`).length >= count,
    [stream, count],
    { timeout: WAIT_MS },
  );
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Root (CI) cannot use chromium's sandbox.
  args: ["--no-sandbox"],
  timeout: WAIT_MS,
});
try {
  const page = await browser.newPage();
  const pageErrors = [];
  page.on("console", (message) => {
    if (message.type() === "error") pageErrors.push(message.text());
  });
  page.on("pageerror", (error) => pageErrors.push(String(error)));

  await page.goto(`${base}/examples/?topic=${topic}&from=earliest&connect=ws,sse`, { timeout: WAIT_MS });
  await page.waitForSelector("#ws-status[data-state=open]", { timeout: WAIT_MS });
  await page.waitForSelector("#sse-status[data-state=open]", { timeout: WAIT_MS });

  await produce([{ n: 0 }, { n: 1 }, { n: 2 }]);
  await produce(["three", { n: 4 }]);
  const expected = ['0:0{"n":0}', '0:1{"n":1}', '0:2{"n":2}', '0:3"three"', '0:4{"n":4}'];
  for (const stream of ["ws", "sse"]) {
    await waitForCount(page, stream, expected.length);
    assert.deepEqual(await shown(page, stream), expected, `${stream} shows the messages in order`);
  }
  assert.equal(await page.textContent("#ws-resume"), "0:5");
  assert.equal(await page.textContent("#sse-resume"), "0:5");

  // Disconnect the WebSocket, produce while it is away, reconnect: the page subscribes with the
  // resume token of the last message it showed, so it gets exactly the missed messages.
  await page.click("#ws-toggle");
  await page.waitForSelector("#ws-status[data-state=closed]", { timeout: WAIT_MS });
  await produce([{ n: 5 }, { n: 6 }]);
  await page.click("#ws-toggle");
  await page.waitForSelector("#ws-status[data-state=open]", { timeout: WAIT_MS });
  assert.equal(await page.textContent("#ws-status"), "open (resumed)");

  // The page's own produce button goes through the same API.
  await page.fill("#value", '{"from":"page"}');
  await page.click("#produce");
  await page.waitForFunction(
    () => document.querySelector("#produce-status").textContent.startsWith("stored at"),
    null,
    { timeout: WAIT_MS },
  );

  const all = [...expected, '0:5{"n":5}', '0:6{"n":6}', '0:7{"from":"page"}'];
  for (const stream of ["ws", "sse"]) {
    await waitForCount(page, stream, all.length);
    assert.deepEqual(await shown(page, stream), all, `${stream} shows every message once, in order`);
  }
  assert.deepEqual(pageErrors, [], "the page logged no errors");
  console.log(`browser test passed: ${all.length} messages over WebSocket and EventSource`);
} finally {
  await browser.close();
}
