// Ordered batches against the real broker and binary: a key's (or a partition's) records are
// processed in offset order through nacks, a kill -9 of ksidecar and a second ksidecar joining.
'use strict';
// The checks are clients/go/ordered_test.go's, from the handler start and end times this
// test logs: no two calls of a key overlap, no call skips a record of its key not yet acked,
// nothing is lost, and the committed offsets reach the end offsets.
const test = require('node:test');
const assert = require('node:assert');
const { Subscriber } = require('..');
const h = require('./helpers');

const quiet = { warn: () => {} };
const PARTS = 4;
const N = 20000;

// One handler call, as logged: key, partition, offset, start/end (ms, fractional), what
// it did and what came of it.
class Call {
  constructor(key, m, sub) {
    this.key = key;
    this.p = m.partition;
    this.off = m.offset;
    this.sub = sub;
    this.start = performance.now();
    this.end = 0;
    this.nacked = false;
    this.status = null; // the ack's or nack's result, once it came
    // The ack was sent on a live stream that then broke before its result came: it may
    // have been applied (and committed), so it counts as an ack, though not as proof.
    this.unknown = false;
    this.acked = false;
  }

  toString() {
    return `${this.key} ${this.p}@${this.off} sub ${this.sub} ${this.start.toFixed(3)}-${this.end.toFixed(3)} ` +
      `${this.nacked ? 'nack' : 'ack'}: ${this.status}${this.unknown ? ' (result lost with its stream)' : ''}`;
  }
}

// The handler: 0-2 ms, then nacks one record in ten and acks the rest, logging each call.
function handler(calls, results, sub, idx, byPartition) {
  return async (m) => {
    const c = new Call(byPartition ? `${m.partition}` : `${m.partition}/${m.key}`, m, idx);
    const d = Math.floor(Math.random() * 3);
    if (d) await h.sleep(d);
    // A private look at the stream generation, only to tell a result lost with its
    // stream (STALE here, maybe applied) from ksidecar's STALE (not applied).
    const live = m._gen === sub._gen;
    const gen = sub._gen;
    c.nacked = Math.random() < 0.1;
    const r = c.nacked ? m.nackWithResult(0) : m.ackWithResult();
    results.push(r.then((st) => {
      c.status = st;
      c.unknown = st === 'STALE' && live && sub._gen !== gen;
    }));
    c.end = performance.now();
    calls.push(c);
  };
}

// checkOrder: every key's calls, in start order: none starts before the one before it
// ended; a run goes on from a call that acked to the key's next offset, and any other call
// starts a run, at or below the key's lowest offset not yet acked (never skipping one). A
// run may start below it: an ACCEPTED ack is not yet committed, and a kill -9 or a
// partition's move replays what the commit did not cover (at-least-once). Every record was
// processed.
function checkOrder(calls, end) {
  const processed = new Set();
  const byKey = new Map();
  for (const c of calls) {
    assert.ok(c.status, `${c.p}@${c.off}: its ack or nack never resolved`);
    c.acked = !c.nacked && (c.status === 'ACCEPTED' || c.unknown);
    processed.add(`${c.p}/${c.off}`);
    if (!byKey.has(c.key)) byKey.set(c.key, []);
    byKey.get(c.key).push(c);
  }
  for (const [p, hi] of Object.entries(end))
    for (let off = 0; off < hi; off++) assert.ok(processed.has(`${p}/${off}`), `${p}@${off} was never processed: lost`);
  let restarts = 0;
  let replays = 0;
  for (const [key, cs] of byKey) {
    cs.sort((a, b) => a.start - b.start);
    const offs = [...new Set(cs.map((c) => c.off))].sort((a, b) => a - b);
    const idx = new Map(offs.map((o, i) => [o, i]));
    const next = (off) => (idx.get(off) + 1 < offs.length ? offs[idx.get(off) + 1] : -1);
    const acked = new Set();
    let low = 0; // index in offs of the lowest offset not yet acked
    for (let i = 0; i < cs.length; i++) {
      const c = cs[i];
      while (low < offs.length && acked.has(offs[low])) low++;
      const lowest = low < offs.length ? offs[low] : -1;
      if (i > 0 && c.start < cs[i - 1].end)
        assert.fail(`key ${key}: ${c.off} started at ${c.start}, while ${cs[i - 1].off} still ran until ${cs[i - 1].end}`);
      const goesOn = i > 0 && !cs[i - 1].nacked && c.off === next(cs[i - 1].off);
      if (!goesOn) restarts++;
      if (!goesOn && c.off < lowest) replays++;
      if (!goesOn && lowest >= 0 && c.off > lowest) {
        const around = cs.slice(Math.max(i - 8, 0), i + 3).map(String).join('\n');
        assert.fail(`key ${key}: call ${i} at ${c.off} (after ${i ? cs[i - 1].off : -1}) while ${lowest} was ` +
          `not yet acked: skipped; calls around it:\n${around}`);
      }
      if (c.acked) acked.add(c.off);
    }
  }
  console.log(`${byKey.size} keys, ${calls.length} calls: ${restarts} runs started ` +
    `(${replays} of them below the lowest offset not acked)`);
}

// The committed offsets reach the end offsets; an empty partition, which nothing commits,
// counts as committed at 0.
async function waitCommittedEnd(group, topic, timeoutMs) {
  const end = h.endOffsets(topic);
  let got;
  const t0 = Date.now();
  await h.waitFor(() => {
    got = h.committed(group, topic, PARTS);
    return Object.keys(end).every((p) => got[p] === end[p] || (end[p] === 0 && got[p] < 0));
  }, timeoutMs, `committed == end offsets of ${topic} (end ${JSON.stringify(end)}, ` +
    `committed ${JSON.stringify(got)})`, 300).catch((e) => {
    e.message += `\nend: ${JSON.stringify(end)}\ncommitted: ${JSON.stringify(got)}`;
    throw e;
  });
  console.log(`committed == end offsets ${JSON.stringify(end)} after ${Date.now() - t0} ms`);
  return end;
}

// n records on 4 partitions (keys distinct keys; 0: none, with ordering=partition) through
// two ksidecars, with nacks, a kill -9 and restart of the first, and the second joining
// the group; then checkOrder.
async function orderedRun(t, keys) {
  const byPartition = keys === 0;
  const mode = `--group.ordering=${byPartition ? 'partition' : 'key'}`;
  const start = h.sidecars(t);
  const topic = h.topicWith(t, 'node-ordered', PARTS, N, keys ? { keys, size: 20 } : { size: 20 });
  const group = h.unique('g-ordered');
  const opts = { group, topics: [topic], logger: quiet, backoffInitialMs: 50, backoffMaxMs: 1000 };
  const calls = [];
  const results = [];
  const subs = [];
  t.after(() => Promise.all(subs.map((s) => s.close(5000).catch(() => {}))));
  const listen = (sc, idx) => {
    const sub = new Subscriber(sc.target, opts);
    subs.push(sub);
    sub.on('error', (e) => console.log(`subscriber ${idx}: ${e.message}`));
    sub.on('message', handler(calls, results, sub, idx, byPartition));
    return sub;
  };

  const t0 = Date.now();
  const a = await start([mode]);
  const subA = listen(a, 0);
  await h.waitFor(() => calls.length >= N / 4, 60000, `${N / 4} calls`, 20);
  await a.kill('SIGKILL');
  console.log(`killed ksidecar -9 after ${calls.length} calls`);
  await h.sleep(300);
  await a.start(); // the same ports
  await h.waitFor(() => calls.length >= (N * 3) / 5, 60000, `${(N * 3) / 5} calls`, 20);
  const b = await start([mode]);
  const subB = listen(b, 1);
  console.log(`second ksidecar joined after ${calls.length} calls`);

  const end = await waitCommittedEnd(group, topic, 60000);
  console.log(`all committed after ${Date.now() - t0} ms`);
  await Promise.all(subs.map((s) => s.close()));
  await Promise.all(results);
  const nacks = calls.filter((c) => c.nacked).length;
  const onB = calls.filter((c) => c.sub === 1).length;
  console.log(`${calls.length} calls (${calls.length - onB} on the first ksidecar, ${onB} on the second), ` +
    `${nacks} nacks; reconnects ${subA.stats.reconnects} and ${subB.stats.reconnects}; ` +
    `dropped ${subA.stats.dropped} and ${subB.stats.dropped}; stale acks ${subA.stats.staleLocal} and ` +
    `${subB.stats.staleLocal} (local)`);
  assert.ok(subA.stats.reconnects >= 1, 'the first Subscriber reconnected after the kill');
  checkOrder(calls, end);
}

test('ordered: 10 keys, each key\'s records processed in offset order (nacks, kill -9, a second ksidecar)',
  (t) => orderedRun(t, 10));
test('ordered: 1 key, its records processed in offset order (nacks, kill -9, a second ksidecar)',
  (t) => orderedRun(t, 1));
test('ordered: group.ordering=partition, each partition\'s records in offset order (nacks, kill -9, a second ksidecar)',
  (t) => orderedRun(t, 0));

test('ordered: the iterator yields each key\'s records in offset order (nacks)', async (t) => {
  const n = 3000;
  const { sc, topic, group } = await h.fixture(t, 'ordered-it', PARTS, n, { keys: 10, size: 20 });
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  t.after(() => sub.close().catch(() => {}));
  const calls = [];
  const results = [];
  const f = handler(calls, results, sub, 0, false);
  const loop = (async () => {
    for await (const m of sub) await f(m);
  })();
  const end = await waitCommittedEnd(group, topic, 60000);
  await sub.close();
  await loop;
  await Promise.all(results);
  console.log(`${calls.length} calls, dropped ${sub.stats.dropped}`);
  assert.ok(sub.stats.dropped > 0, 'nacks took back records the iterator had buffered');
  checkOrder(calls, end);
});
