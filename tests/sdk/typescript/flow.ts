// A produce, read, group and subscription flow through the TypeScript client that
// @hey-api/openapi-ts generates from openapi/herald.json. tests/it/docs/sdk.rs generates the
// client next to this file in a temporary directory, type-checks both with `tsc --strict` (so
// the generated types must fit what a user writes) and runs the result against a node it
// started.
//
// Usage: node flow.js BASE_URL CLIENT_ID CLIENT_SECRET
// Exits non-zero with the failed step on stderr. Every wait has a deadline.

import { createClient } from './gen/client';
import * as herald from './gen/sdk.gen';

// Node's globals this script uses (no @types/node dependency for three names).
declare const process: { argv: string[]; exit(code: number): never };

const DEADLINE_MS = 20_000;
const TOPIC = 'sdk-typescript';
const GROUP = 'sdk-typescript-group';
const SUBSCRIPTION = 'sdk-typescript-sub';
const MESSAGES: Array<[string, { n: number; text?: string }]> = [
  ['k-0', { n: 0, text: 'zero' }],
  ['k-1', { n: 1, text: 'one' }],
  ['k-2', { n: 2 }],
];

function check(condition: boolean, what: string): asserts condition {
  if (!condition) {
    throw new Error(`typescript sdk flow: ${what}`);
  }
}

/** The body of an answer with the expected status; anything else fails the flow. */
function ok<T>(answer: { data?: T; error?: unknown; response: Response }, what: string, status = 200): T {
  check(
    answer.response.status === status && answer.data !== undefined,
    `${what}: HTTP ${answer.response.status}: ${JSON.stringify(answer.error)}`,
  );
  return answer.data as T;
}

async function main(): Promise<void> {
  const [baseUrl, clientId, clientSecret] = process.argv.slice(2);
  check(Boolean(baseUrl && clientId && clientSecret), 'usage: flow.js BASE_URL CLIENT_ID CLIENT_SECRET');
  let accessToken = '';
  const client = createClient({ baseUrl, auth: () => accessToken });

  const issued = ok(
    await herald.token({
      client,
      body: { grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret },
    }),
    'token',
  );
  check(issued.token_type.toLowerCase() === 'bearer', `token type ${issued.token_type}`);
  accessToken = issued.access_token;

  ok(await herald.createTopic({ client, body: { name: TOPIC, partitions: 2 } }), 'create topic', 201);
  const topic = ok(await herald.describeTopic({ client, path: { topic: TOPIC } }), 'describe topic');
  check(topic.partitions.length === 2, `partitions: ${JSON.stringify(topic.partitions)}`);

  // One partition, so the offsets are 0, 1, 2 in request order.
  const produced = ok(
    await herald.produce({
      client,
      path: { topic: TOPIC },
      body: { messages: MESSAGES.map(([key, value]) => ({ key, value, partition: 1 })) },
    }),
    'produce',
  );
  check(
    JSON.stringify(produced.offsets.map((offset) => offset.offset)) === '[0,1,2]',
    `offsets ${JSON.stringify(produced)}`,
  );

  const read = ok(
    await herald.fetch({ client, path: { topic: TOPIC, partition: 1 }, query: { offset: '0', max_messages: 10 } }),
    'fetch',
  );
  check(read.high_watermark === 3, `high watermark ${read.high_watermark}`);
  check(
    JSON.stringify(read.messages.map((message) => [message.key, message.value])) === JSON.stringify(MESSAGES),
    `read back ${JSON.stringify(read.messages)}`,
  );

  // A consumer group: join, poll everything, commit, and the lag is 0.
  const member = ok(await herald.joinGroup({ client, path: { group: GROUP }, body: { topics: [TOPIC] } }), 'join');
  const consumed: number[] = [];
  let generation = member.generation;
  let cursor: string | undefined;
  const pollDeadline = Date.now() + DEADLINE_MS;
  while (consumed.length < MESSAGES.length) {
    check(Date.now() < pollDeadline, `group poll got ${consumed.length} messages`);
    const polled = ok(
      await herald.poll({
        client,
        path: { group: GROUP, member: member.member_id },
        body: { generation, cursor, max_wait_ms: 500 },
      }),
      'poll',
    );
    generation = polled.generation;
    cursor = polled.cursor;
    consumed.push(...polled.messages.map((message) => message.offset));
  }
  check(JSON.stringify(consumed.sort()) === '[0,1,2]', `polled offsets ${consumed}`);
  const committed = await herald.commitOffsets({
    client,
    path: { group: GROUP },
    body: { generation, member_id: member.member_id, offsets: [{ topic: TOPIC, partition: 1, offset: 3 }] },
  });
  check(committed.response.status === 204, `commit: HTTP ${committed.response.status}: ${JSON.stringify(committed.error)}`);
  const group = ok(await herald.describeGroup({ client, path: { group: GROUP } }), 'describe group');
  const lag = group.offsets.find((offset) => offset.topic === TOPIC && offset.partition === 1)?.lag;
  check(lag === 0, `lag after commit: ${JSON.stringify(group)}`);
  const left = await herald.leaveGroup({ client, path: { group: GROUP, member: member.member_id } });
  check(left.response.status === 204, `leave: HTTP ${left.response.status}`);

  // A queue subscription: pull every message, ack them, nothing left in flight or backlog.
  ok(
    await herald.putSubscription({ client, path: { sub: SUBSCRIPTION }, body: { topic: TOPIC, start: 'earliest' } }),
    'create subscription',
    201,
  );
  const pulled: Array<{ ack_id: string; n: number }> = [];
  const pullDeadline = Date.now() + DEADLINE_MS;
  while (pulled.length < MESSAGES.length) {
    check(Date.now() < pullDeadline, `pull got ${pulled.length} messages`);
    const answer = ok(
      await herald.pull({ client, path: { sub: SUBSCRIPTION }, body: { max_messages: 10, max_wait_ms: 500 } }),
      'pull',
    );
    pulled.push(...answer.messages.map((item) => ({ ack_id: item.ack_id, n: (item.message.value as { n: number }).n })));
  }
  check(JSON.stringify(pulled.map((item) => item.n).sort()) === '[0,1,2]', `pulled ${JSON.stringify(pulled)}`);
  const acked = ok(
    await herald.ack({ client, path: { sub: SUBSCRIPTION }, body: { ack_ids: pulled.map((item) => item.ack_id) } }),
    'ack',
  );
  check(acked.acked.length === MESSAGES.length && acked.expired.length === 0, `ack: ${JSON.stringify(acked)}`);
  const drainDeadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const subscription = ok(await herald.getSubscription({ client, path: { sub: SUBSCRIPTION } }), 'subscription');
    if (subscription.in_flight === 0 && subscription.backlog === 0) {
      break;
    }
    check(Date.now() < drainDeadline, `subscription never drained: ${JSON.stringify(subscription)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  console.log('typescript sdk flow: ok');
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
