// Subscriber against the real ksidecar binary and the real broker (issue #13's test list).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { Subscriber, Publisher, KsidecarAuthError, KsidecarConnectError } = require('..');
const h = require('./helpers');

const quiet = { warn: () => {} };

// Consumes until pred(seen) holds; seen maps "partition/offset" to the deliveries' attempts.
function tracker() {
  const seen = new Map();
  return {
    seen,
    add(m) {
      const k = `${m.partition}/${m.offset}`;
      const a = seen.get(k) || [];
      a.push(m.attempt);
      seen.set(k, a);
    },
  };
}

test('every record is delivered and acked once; committed offsets == end offsets (iterator)', async (t) => {
  const start = h.sidecars(t);
  const N = 6000;
  const topic = h.topicWith(t, 'node-once', 4, N, { size: 100 });
  const sc = await start();
  const group = h.unique('g-once');
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  const tr = tracker();
  const results = [];
  const t0 = Date.now();
  for await (const msg of sub) {
    tr.add(msg);
    assert.strictEqual(msg.value.length, 100);
    results.push(msg.ackWithResult());
    if (tr.seen.size === N) break; // break closes the subscriber, flushing the acks
  }
  const statuses = await Promise.all(results);
  console.log(`${N} records in ${Date.now() - t0} ms, ${sub.stats.writes} stream writes for ` +
    `${sub.stats.acksSent} acks`);
  assert.deepStrictEqual(statuses.filter((s) => s !== 'ACCEPTED'), []);
  assert.strictEqual(tr.seen.size, N);
  for (const [k, a] of tr.seen) assert.deepStrictEqual(a, [1], `${k} delivered ${a.length} times`);
  assert.ok(sub.stats.writes < N / 10, `acks are batched on the wire (${sub.stats.writes} writes)`);
  await h.waitCommitted(group, topic, 4);
});

test('every record is delivered and acked once (event form)', async (t) => {
  const start = h.sidecars(t);
  const N = 3000;
  const topic = h.topicWith(t, 'node-ev', 3, N);
  const sc = await start();
  const group = h.unique('g-ev');
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  const tr = tracker();
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', (m) => {
      tr.add(m);
      m.ack();
      if (tr.seen.size === N) resolve();
    });
  });
  await sub.close();
  assert.strictEqual(tr.seen.size, N);
  for (const [k, a] of tr.seen) assert.deepStrictEqual(a, [1], `${k} delivered ${a.length} times`);
  await h.waitCommitted(group, topic, 3);
});
