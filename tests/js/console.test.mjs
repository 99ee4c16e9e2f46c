// The web console (/console/) in Debian's chromium against a running node: every check goes
// through the page as an operator would (labels, buttons, links), and what the page did is then
// checked over the HTTP API. Run by tests/it/ui/console.rs, which starts the node:
//
//   HERALD_URL=http://127.0.0.1:8080 node console.test.mjs
//   HERALD_URL=... HERALD_CLIENT_ID=ops HERALD_CLIENT_SECRET=... node console.test.mjs   (node with --auth)
//   HERALD_URL=... HERALD_JOIN_NODE=2,HTTP_ADDR,RAFT_ADDR node console.test.mjs   (a node started with --join)
//
// CONSOLE_SCREENSHOTS=dir saves a screenshot of each page there (docs/console/ is made so).
// Exits non-zero with the reason on the first failed check. Every wait has a deadline.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.HERALD_URL;
assert.ok(base, "HERALD_URL must be set");
const clientId = process.env.HERALD_CLIENT_ID;
const clientSecret = process.env.HERALD_CLIENT_SECRET;
const screenshots = process.env.CONSOLE_SCREENSHOTS;
if (screenshots) mkdirSync(screenshots, { recursive: true });
const WAIT_MS = 20_000;
/** Membership changes: a node catching up, replicas moving off a drained one. */
const MEMBERSHIP_WAIT_MS = 90_000;
const joinNode = process.env.HERALD_JOIN_NODE?.split(",");
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };

let token;
async function api(method, path, body) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const answer = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await answer.text();
  return { status: answer.status, body: text ? JSON.parse(text) : undefined };
}
async function ok(method, path, body) {
  const answer = await api(method, path, body);
  assert.ok(answer.status >= 200 && answer.status < 300, `${method} ${path} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body;
}
const produce = (topic, messages) => ok("POST", `/v1/topics/${topic}/messages?acks=all`, { messages });

async function shot(page, name) {
  if (!screenshots) return;
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(screenshots, `${name}.png`) });
}

/** Waits until `locator`'s text passes `check`; fails with the last text seen. */
async function waitForText(locator, check, what, waitMs = WAIT_MS) {
  const deadline = Date.now() + waitMs;
  let text;
  for (let i = 0; i < 4000 && Date.now() < deadline; i++) {
    text = await locator.textContent({ timeout: WAIT_MS }).catch(() => undefined);
    if (text !== undefined && check(text)) return text;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`${what}: last seen ${JSON.stringify(text)}`);
}

/** Waits until `locator` matches `count` elements; fails with the last count seen. */
async function waitForCount(locator, count, what, waitMs = WAIT_MS) {
  const deadline = Date.now() + waitMs;
  let seen;
  for (let i = 0; i < 4000 && Date.now() < deadline; i++) {
    seen = await locator.count();
    if (seen === count) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.fail(`${what}: ${seen} instead of ${count}`);
}

/**
 * The topic list a page at a time: 23 topics of one prefix, 10 a page; Next and Previous show
 * the right ones, and coming back from a topic's page keeps the page. Then the message
 * browser's topic picker suggests names by prefix.
 */
async function pagesOfTopics(page) {
  const names = Array.from({ length: 23 }, (_, i) => `paged-${String(i).padStart(2, "0")}`);
  for (const name of names) await ok("POST", "/v1/topics", { name, partitions: 1 });
  // Over the API too: 10 a page, the last one without a token.
  const first = await ok("GET", "/v1/topics?limit=10&prefix=paged-");
  assert.equal(first.topics.length, 10);
  assert.ok(first.next_page_token, "a first page of 10 says where the next starts");

  await page.goto(`${base}/console/topics`);
  await page.getByLabel("Per page").selectOption("10");
  await page.getByLabel("Name starts with").fill("paged-");
  const count = page.getByTestId("topic-count");
  const previous = page.getByRole("button", { name: "Previous", exact: true });
  const next = page.getByRole("button", { name: "Next", exact: true });
  const expectPage = async (number, from, to, last) => {
    const summary = `Page ${number} · topics ${from + 1}–${to} starting with "paged-" · ${last ? "last page" : "more follow"}`;
    await waitForText(count, (t) => t === summary, `page ${number} of the topics`);
    const listed = await page.getByTestId("topics-table").locator("tbody tr td:first-child").allTextContents();
    assert.deepEqual(listed, names.slice(from, to), `page ${number} lists its topics`);
    assert.equal(await previous.isDisabled(), number === 1, `Previous on page ${number}`);
    assert.equal(await next.isDisabled(), last, `Next on page ${number}`);
  };
  await expectPage(1, 0, 10, false);
  await next.click();
  await expectPage(2, 10, 20, false);
  await page.getByRole("link", { name: "paged-12", exact: true }).click();
  await page.waitForURL("**/console/topics/paged-12", { timeout: WAIT_MS });
  await page.getByTestId("partitions-table").waitFor({ timeout: WAIT_MS });
  await page.goBack();
  await page.waitForURL("**/console/topics", { timeout: WAIT_MS });
  await expectPage(2, 10, 20, false);
  await next.click();
  await expectPage(3, 20, 23, true);
  await previous.click();
  await expectPage(2, 10, 20, false);
  await previous.click();
  await expectPage(1, 0, 10, false);
  await page.getByLabel("Name starts with").fill("paged-nothing");
  await waitForText(count, (t) => t === 'No topics start with "paged-nothing"', "no topic has the prefix");
  assert.equal(await next.isDisabled(), true);

  // The message browser suggests the first names with what was typed, and opens one.
  await page.goto(`${base}/console/messages`);
  const picker = page.getByLabel("Topic", { exact: true });
  await picker.fill("paged-1");
  await waitForCount(page.getByTestId("topic-suggestions").locator("option"), 10, "names starting with paged-1 suggested");
  await picker.fill("paged-12");
  await picker.press("Enter");
  await page.waitForURL("**/console/messages?topic=paged-12", { timeout: WAIT_MS });
  await page.getByRole("button", { name: "Find" }).waitFor({ timeout: WAIT_MS });
}

/** The page's errors: console errors and uncaught exceptions. */
function watchErrors(page, errors) {
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(`${page.url()}: ${message.text()}`);
  });
  page.on("pageerror", (error) => errors.push(`${page.url()}: ${error}`));
}

async function noHorizontalScroll(page, what) {
  const [scroll, width] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  assert.ok(scroll <= width, `${what} scrolls sideways at ${width}px (${scroll}px wide)`);
}

async function openTopicsFromKeyboard(page) {
  await page.goto(`${base}/console/`);
  await page.getByTestId("nodes-up").filter({ hasText: /of/ }).waitFor({ timeout: WAIT_MS });
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Overview");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Topics");
  await page.keyboard.press("Enter");
  await page.waitForURL("**/console/topics", { timeout: WAIT_MS });
}

async function createTopicInPage(page, name, partitions) {
  await page.goto(`${base}/console/topics`);
  await page.getByText("Create a topic").click();
  await page.getByLabel("Name", { exact: true }).fill(name);
  await page.getByLabel("Partitions", { exact: true }).fill(String(partitions));
  await page.getByRole("button", { name: "Create topic" }).click();
  await page.waitForURL(`**/console/topics/${name}`, { timeout: WAIT_MS });
  await waitForText(page.getByTestId("partitions-table").locator("tbody"), () => true, "partitions shown");
  const rows = page.getByTestId("partitions-table").locator("tbody tr");
  await rows.nth(partitions - 1).waitFor({ timeout: WAIT_MS });
  assert.equal(await rows.count(), partitions);
  const topic = await ok("GET", `/v1/topics/${name}`);
  assert.equal(topic.partitions.length, partitions);
}

async function liveTailReceives(page, topic) {
  await page.getByRole("button", { name: "Start live tail" }).click();
  await page.locator("[data-testid=tail-state][data-state=open]").waitFor({ timeout: WAIT_MS });
  await produce(topic, [{ value: { from: "curl" } }]);
  await page.getByTestId("tail-messages").locator("li", { hasText: '{"from":"curl"}' }).waitFor({ timeout: WAIT_MS });
}

async function withoutAuth(browser, errors) {
  const page = await browser.newPage({ viewport: DESKTOP });
  watchErrors(page, errors);

  // Overview, and the keyboard reaches the sections.
  await openTopicsFromKeyboard(page);
  await page.goto(`${base}/console/`);
  await waitForText(page.getByTestId("produce-rate"), (t) => t.endsWith("/s"), "the produce rate is shown");

  // Create a topic, configure it.
  const topic = "console-orders";
  await createTopicInPage(page, topic, 2);
  await page.getByLabel("Retention (ms)").fill("3600000");
  await page.getByLabel("Compression").selectOption("zstd");
  await page.getByRole("button", { name: "Save configuration" }).click();
  await page.getByRole("status").filter({ hasText: "saved" }).waitFor({ timeout: WAIT_MS });
  const configured = await ok("GET", `/v1/topics/${topic}`);
  assert.equal(configured.config.retention_ms, 3600000);
  assert.equal(configured.config.compression, "zstd");

  // Produce a message from the page and find it by key, pretty-printed.
  await page.getByRole("link", { name: "Browse messages" }).click();
  await page.waitForURL(`**/console/messages?topic=${topic}`, { timeout: WAIT_MS });
  await page.getByLabel("Key (optional)").fill("user-42");
  await page.getByLabel("Value", { exact: true }).fill('{"item":"book","qty":1}');
  await page.getByRole("button", { name: "Produce", exact: true }).click();
  const stored = await waitForText(page.getByTestId("produced"), (t) => t.startsWith("stored at"), "the produce is acknowledged");
  const [, partition, offset] = stored.match(/partition (\d+), offset (\d+)/).map(Number);
  const read = await ok("GET", `/v1/topics/${topic}/partitions/${partition}/messages?offset=${offset}&max_messages=1`);
  assert.deepEqual(read.messages[0].value, { item: "book", qty: 1 });
  assert.equal(read.messages[0].key, "user-42");

  await page.getByLabel("by key").check();
  await page.getByLabel("Key", { exact: true }).fill("user-42");
  await page.getByRole("button", { name: "Find" }).click();
  const found = page.getByTestId("found-messages").locator("li");
  await found.first().waitFor({ timeout: WAIT_MS });
  assert.equal(await found.count(), 1);
  await found.first().locator("summary").click();
  assert.match(await found.first().locator("pre.value").textContent(), /"item": "book",\n {2}"qty": 1/);

  // Bytes and headers, read by partition and offset.
  await produce(topic, [{ partition: 0, value_b64: "AAEC/w==", headers: { trace: "abc" } }]);
  await page.getByLabel("by offset").check();
  await page.getByLabel("Partition", { exact: true }).selectOption("0");
  await page.getByLabel("From offset").fill("earliest");
  await page.getByRole("button", { name: "Find" }).click();
  const bytes = page.getByTestId("found-messages").locator("li", { hasText: "4 bytes" });
  await bytes.waitFor({ timeout: WAIT_MS });
  await bytes.locator("summary").click();
  assert.match(await bytes.locator("pre.value").textContent(), /00 01 02 ff/);
  await bytes.getByLabel("base64").check();
  assert.equal(await bytes.locator("pre.value").textContent(), "AAEC/w==");
  assert.match(await bytes.locator("table.headers").textContent(), /traceabc/);

  // By time: everything from a minute ago, over every partition.
  await page.getByLabel("by timestamp").check();
  await page.getByLabel("Partition", { exact: true }).selectOption("all");
  await page.getByLabel("From time (UTC)").fill(datetimeLocalValue(new Date(Date.now() - 60_000)));
  await page.getByRole("button", { name: "Find" }).click();
  await waitForText(page.getByRole("status").filter({ hasText: "messages; from" }), (t) => t.startsWith("2 messages"), "both messages found by time");

  // The live tail gets a message produced over plain HTTP.
  await liveTailReceives(page, topic);
  await shot(page, "messages");

  // A group's lag falls when it commits.
  const group = "console-billing";
  const joined = await ok("POST", `/v1/groups/${group}/members`, { topics: [topic], session_timeout_ms: 120000 });
  const commit = (offsets) => ok("POST", `/v1/groups/${group}/offsets`, { member_id: joined.member_id, generation: joined.generation, offsets });
  const partitions = (await ok("GET", `/v1/topics/${topic}`)).partitions;
  await commit(partitions.map((p) => ({ topic, partition: p.partition, offset: 0 })));
  const before = await ok("GET", `/v1/groups/${group}`);
  const lag = before.offsets.reduce((sum, o) => sum + o.lag, 0);
  assert.ok(lag >= 3, `the group lags ${lag}`);
  await page.goto(`${base}/console/groups`);
  await page.getByRole("link", { name: group }).click();
  await waitForText(page.getByTestId("group-lag"), (t) => t === String(lag), `the group's lag of ${lag} is shown`);
  await shot(page, "consumer-group");
  await commit(before.offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: o.high_watermark })));
  await waitForText(page.getByTestId("group-lag"), (t) => t === "0", "the lag falls to 0 after the commit");

  // Grow the topic from its page.
  await page.goto(`${base}/console/topics/${topic}`);
  await page.getByLabel("Partitions", { exact: true }).fill("3");
  await page.getByRole("button", { name: "Grow" }).click();
  await page.getByTestId("partitions-table").locator("tbody tr").nth(2).waitFor({ timeout: WAIT_MS });
  assert.equal((await ok("GET", `/v1/topics/${topic}`)).partitions.length, 3);
  await shot(page, "topic");

  // Delete a topic, with its confirmation.
  await ok("POST", "/v1/topics", { name: "console-doomed", partitions: 1 });
  await page.goto(`${base}/console/topics/console-doomed`);
  await page.getByRole("button", { name: "Delete topic" }).click();
  const dialog = page.getByRole("alertdialog");
  assert.equal(await dialog.getByRole("button", { name: "Delete topic" }).isDisabled(), true);
  await dialog.getByLabel("Name to confirm").fill("console-doomed");
  await dialog.getByRole("button", { name: "Delete topic" }).click();
  await page.waitForURL("**/console/topics", { timeout: WAIT_MS });
  assert.equal((await api("GET", "/v1/topics/console-doomed")).status, 404);
  await waitForText(page.getByTestId("topic-count"), (t) => /^\d+ topics?$/.test(t), "the topic list");
  await shot(page, "topics");
  await pagesOfTopics(page);

  // A subscription whose message is dead-lettered, then redriven from the page.
  await ok("POST", "/v1/topics", { name: "console-jobs", partitions: 1 });
  await ok("POST", "/v1/topics", { name: "console-jobs-dlq", partitions: 1 });
  await ok("PUT", "/v1/subscriptions/console-workers", {
    topic: "console-jobs",
    ack_deadline_ms: 100,
    retry_policy: { min_backoff_ms: 0, max_backoff_ms: 0 },
    dead_letter_policy: { topic: "console-jobs-dlq", max_delivery_attempts: 1 },
  });
  await produce("console-jobs", [{ value: { job: 1 } }]);
  const pulled = await ok("POST", "/v1/subscriptions/console-workers/pull", { max_messages: 1, max_wait_ms: 5000 });
  assert.equal(pulled.messages.length, 1);
  // Not acked within its deadline: the next pull moves it to the dead-letter topic.
  for (let i = 0; i < 20 && (await ok("GET", "/v1/subscriptions/console-workers")).dead_lettered === 0; i++) {
    await ok("POST", "/v1/subscriptions/console-workers/pull", { max_messages: 1, max_wait_ms: 500 });
  }
  await page.goto(`${base}/console/subscriptions`);
  await page.getByRole("link", { name: "console-workers" }).click();
  await waitForText(page.getByTestId("sub-dead-lettered"), (t) => t === "1", "the message is dead-lettered");
  await page.getByTestId("dead-letters").locator("li", { hasText: '{"job":1}' }).waitFor({ timeout: WAIT_MS });
  await page.getByRole("button", { name: "Redrive" }).click();
  await waitForText(page.getByTestId("redrive-state"), (t) => t.includes("done") && t.includes("1 redriven"), "the redrive is done");
  await shot(page, "subscription");

  // Schemas: two versions of an Avro subject used by a topic, side by side; the level set in
  // the page; a wire-format message read back decoded.
  const subject = `${topic}-value`;
  const order = (fields) => JSON.stringify({ type: "record", name: "Order", fields });
  const v1 = await ok("POST", `/schema-registry/subjects/${subject}/versions`, { schema: order([{ name: "id", type: "int" }]) });
  await ok("POST", `/schema-registry/subjects/${subject}/versions`, {
    schema: order([{ name: "id", type: "int" }, { name: "note", type: "string", default: "" }]),
  });
  await ok("PATCH", `/v1/topics/${topic}`, { config: { value_subject: subject } });
  // Version 1's record {"id": 21}: magic byte, schema id, Avro's zig-zag 42.
  const framed = Buffer.from([0, 0, 0, 0, v1.id, 42]).toString("base64");
  await produce(topic, [{ value_b64: framed, partition: 0 }]);
  await page.goto(`${base}/console/schemas`);
  const row = page.getByTestId("subjects-table").locator("tbody tr", { hasText: subject });
  await waitForText(row, (t) => t.includes("v2") && t.includes("AVRO") && t.includes(topic), "the subject is listed with its topic");
  await page.goto(`${base}/console/schemas/${subject}`);
  await waitForText(page.getByTestId("diff-stats"), (t) => t.includes("v1 → v2") && t.includes("added"), "the two versions are compared");
  await page.getByTestId("schema-diff").locator("td.diff-add", { hasText: "note" }).first().waitFor({ timeout: WAIT_MS });
  await page.getByLabel("Compatibility level").selectOption("FULL");
  await page.getByRole("button", { name: "Set compatibility" }).click();
  await page.getByRole("status").filter({ hasText: "compatibility set to FULL" }).waitFor({ timeout: WAIT_MS });
  assert.equal((await ok("GET", `/schema-registry/config/${subject}`)).compatibilityLevel, "FULL");
  await shot(page, "schemas");
  await page.goto(`${base}/console/messages?topic=${topic}`);
  await page.getByLabel("decode with schemas").check();
  await page.getByRole("button", { name: "Find" }).click();
  await waitForText(page.getByTestId("value-schema").first(), (t) => t.includes(`schema ${v1.id}`) && t.includes(subject), "a decoded message shows its schema");
  await ok("PATCH", `/v1/topics/${topic}`, { config: { value_subject: null } });

  // Cluster and security.
  await page.goto(`${base}/console/cluster`);
  await page.getByTestId("nodes-table").locator("tbody tr").first().waitFor({ timeout: WAIT_MS });
  // The rebalance plan (a dry run): one node has nothing to move.
  await waitForText(page.getByTestId("rebalance-summary"), (t) => t.startsWith("Balanced"), "one node's rebalance plan moves nothing");
  assert.match(await page.getByTestId("rebalance-nodes").locator("tbody tr").first().textContent(), /^1\d+\d+$/);
  await page.goto(`${base}/console/security`);
  await page.getByTestId("audit-table").locator("tbody tr", { hasText: "create topic" }).first().waitFor({ timeout: WAIT_MS });
  await page.getByRole("cell", { name: "admin", exact: true }).first().waitFor({ timeout: WAIT_MS });
  await shot(page, "security");
  await page.goto(`${base}/console/`);
  await waitForText(page.getByTestId("produced-total"), (t) => Number(t) >= 5, "the messages produced are counted");
  await waitForText(page.getByTestId("produce-rate"), (t) => t.endsWith("/s"), "the produce rate is shown");
  await shot(page, "overview");
  await page.close();

  // On a phone: no page scrolls sideways.
  const phone = await browser.newPage({ viewport: PHONE });
  watchErrors(phone, errors);
  for (const [path, ready, name] of [
    ["/", "nodes-up", "phone-overview"],
    ["/topics", "topic-count", "phone-topics"],
    [`/messages?topic=${topic}`, null, "phone-messages"],
  ]) {
    await phone.goto(`${base}/console${path}`);
    if (ready) await waitForText(phone.getByTestId(ready), (t) => /\d/.test(t), `${path} on a phone`);
    else await phone.getByRole("button", { name: "Find" }).waitFor({ timeout: WAIT_MS });
    await noHorizontalScroll(phone, path);
    await shot(phone, name);
  }
  await phone.close();
}

/** The script's own token (tokens of the auth run last 20 s: it takes a new one before it uses one again). */
async function grantToken(secret) {
  const form = new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: secret });
  const granted = await fetch(`${base}/oauth/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: form });
  assert.equal(granted.status, 200);
  token = (await granted.json()).access_token;
}

async function withAuth(browser, errors) {
  await grantToken(clientSecret);

  const page = await browser.newPage({ viewport: DESKTOP });
  watchErrors(page, errors);
  // What the node answers on the console's WebSockets.
  const socketFrames = [];
  page.on("websocket", (socket) => socket.on("framereceived", (frame) => socketFrames.push(String(frame.payload))));
  await page.goto(`${base}/console/topics`);
  await page.getByRole("form", { name: "Sign in" }).waitFor({ timeout: WAIT_MS });
  await shot(page, "sign-in");
  await page.getByLabel("Client id").fill(clientId);
  await page.getByLabel("Client secret").fill(clientSecret);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("topic-count").filter({ hasText: "topics" }).waitFor({ timeout: WAIT_MS });
  const stored = await page.evaluate(() => JSON.stringify(Object.fromEntries(Object.entries(sessionStorage))));
  assert.ok(stored.includes("token"), "the session holds a token");
  assert.ok(!stored.includes(clientSecret), "the secret is not kept");

  await openTopicsFromKeyboard(page);
  const topic = "console-secured";
  await createTopicInPage(page, topic, 1);
  await page.goto(`${base}/console/messages?topic=${topic}`);
  await liveTailReceives(page, topic);

  // The node's tokens last 20 s: the console renews its token silently (token exchange) once
  // 16 s of it passed, without asking for the secret, and the open live tail takes the new one.
  const sessionToken = () => page.evaluate(() => JSON.parse(sessionStorage.getItem("herald-console-session")).token);
  const renewal = page.getByRole("region", { name: "Session ending" });
  const first = await sessionToken();
  for (let i = 0; i < 600 && (await sessionToken()) === first; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.notEqual(await sessionToken(), first, "the console renewed its token on its own");
  assert.equal(await renewal.count(), 0, "no prompt for the secret while renewals succeed");
  await grantToken(clientSecret);
  await produce(topic, [{ value: { after: "renewal" } }]);
  await page.getByTestId("tail-messages").locator("li", { hasText: '{"after":"renewal"}' }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.getByTestId("tail-state").getAttribute("data-state"), "open");
  const authenticated = socketFrames.map((f) => JSON.parse(f)).find((f) => f.op === "authenticated");
  assert.ok(authenticated, `the socket took the new token: ${socketFrames.join(" ")}`);
  assert.equal(authenticated.subject, clientId);

  // Rotating the client's secret ends the session: the next renewal is refused and the console
  // asks for the (new) secret, which replaces the token.
  const rotated = await api("POST", `/v1/auth/clients/${clientId}/secret`, {});
  assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
  const newSecret = rotated.body.client_secret;
  await renewal.waitFor({ timeout: WAIT_MS });
  assert.match(await renewal.textContent(), /rotated/);
  // The browser logs the refused renewal (400 from /oauth/token) as a failed load: expected here.
  const refusedLoad = errors.findIndex((error) => error.includes("status of 400"));
  assert.ok(refusedLoad >= 0, `the refused renewal: ${errors.join(" ")}`);
  errors.splice(refusedLoad, 1);
  const before = await sessionToken();
  await renewal.getByLabel("Client secret").fill(newSecret);
  await renewal.getByRole("button", { name: "Sign in" }).click();
  for (let i = 0; i < 200 && (await sessionToken()) === before; i++) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.notEqual(await sessionToken(), before, "the session holds a new token");
  assert.ok(!(await page.evaluate(() => JSON.stringify(sessionStorage))).includes(newSecret), "the secret is not kept");
  await renewal.waitFor({ state: "detached", timeout: WAIT_MS });

  await page.goto(`${base}/console/security`);
  await page.getByRole("cell", { name: clientId, exact: true }).first().waitFor({ timeout: WAIT_MS });

  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("form", { name: "Sign in" }).waitFor({ timeout: WAIT_MS });
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await page.close();
}

async function addAndDrain(browser, errors) {
  const [id, httpAddr, raftAddr] = joinNode;
  const page = await browser.newPage({ viewport: DESKTOP });
  watchErrors(page, errors);
  await page.goto(`${base}/console/cluster`);
  await page.getByLabel("Node id").fill(id);
  await page.getByLabel("HTTP address").fill(httpAddr);
  await page.getByLabel("Raft address").fill(raftAddr);
  await page.getByRole("button", { name: "Add node" }).click();
  await page.getByRole("status").filter({ hasText: `node ${id} added` }).waitFor({ timeout: WAIT_MS });
  const row = page.getByTestId("nodes-table").locator("tbody tr", { hasText: raftAddr });
  await waitForText(row.locator(".status"), (t) => t === "up", `node ${id} is up`, MEMBERSHIP_WAIT_MS);
  // Replicas for it to hold, then to give away: one replica each, so the other node can take
  // them all (the default factor would put a replica of every partition on both nodes).
  await ok("POST", "/v1/topics", { name: "console-spread", partitions: 4, replication_factor: 1 });
  await waitForText(row.locator("td.num").nth(1), (t) => Number(t) > 0, `node ${id} holds replicas`, MEMBERSHIP_WAIT_MS);
  // The rebalance plan counts both nodes' shares.
  await waitForCount(page.getByTestId("rebalance-nodes").locator("tbody tr"), 2, "both nodes in the rebalance plan");
  await shot(page, "cluster");

  await row.getByRole("button", { name: `Drain node ${id}` }).click();
  await row.getByLabel("Name to confirm").fill(id);
  await row.getByRole("alertdialog").getByRole("button", { name: `Drain node ${id}` }).click();
  // Draining, its replicas moving away, then gone from the cluster.
  const deadline = Date.now() + MEMBERSHIP_WAIT_MS;
  for (let i = 0; i < 2000 && (await row.count()) > 0; i++) {
    assert.ok(Date.now() < deadline, `node ${id} is still listed: ${await row.textContent().catch(() => "")}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const cluster = await ok("GET", "/v1/cluster");
  assert.ok(!cluster.nodes.some((n) => String(n.id) === id), `node ${id} left: ${JSON.stringify(cluster.nodes)}`);
  const spread = await ok("GET", "/v1/topics/console-spread");
  assert.ok(spread.partitions.every((p) => !p.replicas.map(String).includes(id)), "no replica is left on the drained node");
  await page.close();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Root (CI) cannot use chromium's sandbox.
  args: ["--no-sandbox"],
  timeout: WAIT_MS,
});
try {
  const errors = [];
  try {
    if (joinNode) await addAndDrain(browser, errors);
    else if (clientId) await withAuth(browser, errors);
    else await withoutAuth(browser, errors);
  } catch (error) {
    // What the page showed when it failed, and what it logged.
    for (const context of browser.contexts()) {
      for (const page of context.pages()) {
        const path = join(tmpdir(), `herald-console-failure-${Date.now()}.png`);
        await page.screenshot({ path, fullPage: true }).catch(() => {});
        console.error(`the page at ${page.url()} when it failed: ${path}`);
      }
    }
    console.error(`page errors: ${JSON.stringify(errors)}`);
    throw error;
  }
  assert.deepEqual(errors, [], "the console logged no errors");
  const run = joinNode ? "adding and draining a node" : clientId ? "with authentication" : "without authentication";
  console.log(`console browser test passed (${run})`);
} finally {
  await browser.close();
}

/**
 * The value a `datetime-local` input with `step="1"` holds for `date` (UTC): Chromium drops
 * zero seconds (`07:31`, not `07:31:00`), and Playwright's `fill` refuses a value the input
 * would normalise, so a run that fell on a whole minute failed before this.
 */
function datetimeLocalValue(date) {
  const seconds = date.toISOString().slice(0, 19);
  return seconds.endsWith(":00") ? seconds.slice(0, 16) : seconds;
}
