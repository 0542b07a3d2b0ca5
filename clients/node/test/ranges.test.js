// Plain acks as ack ranges answered by position, without a server: the requests a flush writes
// (decoded with protobufjs) and how answers (a count, and each refused record by its own id)
// resolve the acks they answer, matched by their order.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const protobuf = require('protobufjs');
const codec = require('../lib/codec');
const { protoDir } = require('../lib/connect');
const { Subscriber, KsidecarConfigError } = require('..');

const root = protobuf.loadSync(path.join(protoDir(), 'ksidecar/v1/consumer.proto'));
const Req = root.lookupType('ksidecar.v1.SubscribeRequest');
const Resp = root.lookupType('ksidecar.v1.SubscribeResponse');
const plain = (buf) => Req.toObject(Req.decode(buf), { longs: Number, defaults: false });

const HEAD = 'a18cc2b65743ce1e18';
const aid = (off, part = 2, epoch = 3, attempt = 1, topic = 'demo-x') =>
  `${HEAD}-${epoch}-${part}-${off}-${attempt}-${topic}`;

// A Subscriber on a fake stream: what it writes is decoded into sent; deliver() feeds it a
// batch and returns the messages, answer() feeds it an AckResults.
function harness(t, opts = {}) {
  const warnings = [];
  const sub = new Subscriber('127.0.0.1:1', {
    group: 'g', topics: ['demo-x'], logger: { warn: (w) => warnings.push(w) }, ...opts,
  });
  const sent = [];
  sub._call = { write: (b) => sent.push(plain(b)), cancel() {}, end() {} };
  t.after(() => {
    sub._call = null;
    sub.flush();
    sub._client.close();
  });
  const deliver = (offsets, part = 2) => {
    const records = offsets.map((o) => ({ topic: 'demo-x', partition: part, offset: o, ackId: aid(o, part),
      attempt: 1 }));
    const from = sub._queue.length;
    sub._onData(Buffer.from(Resp.encode(Resp.fromObject({ batch: { records } })).finish()));
    return sub._queue.slice(from);
  };
  const answer = (results, accepted = 0) =>
    sub._onData(Buffer.from(Resp.encode(Resp.fromObject({ ackResults: { results, accepted } })).finish()));
  return { sub, sent, deliver, answer, warnings };
}

const ackIds = (req) => req.ack.ackIds;
// Lets the promise callbacks run; returns what each promise resolved with so far (undefined: not yet).
async function states(promises) {
  const got = promises.map(() => undefined);
  promises.forEach((p, i) => p.then((v) => (got[i] = v)));
  await new Promise((r) => setImmediate(r));
  return got;
}

test('a flush groups acks by partition, sorts their offsets and sends each run as one range', (t) => {
  const { sub, sent, deliver } = harness(t);
  const a = deliver([100, 101, 102, 103, 104, 105, 106, 107, 108, 109]);
  const b = deliver([7, 8], 5);
  const c = deliver([20], 9);
  // Interleaved and out of order, as concurrent handlers ack; 105 is not acked (a gap).
  for (const m of [a[3], b[1], a[0], a[9], a[2], c[0], a[1], b[0], a[4], a[8], a[6], a[7]]) m.ack();
  sub.flush();
  assert.strictEqual(sent.length, 1);
  assert.deepStrictEqual(sent[0], { ack: {
    ackIds: [aid('100~104'), aid('106~109'), aid('7~8', 5), aid(20, 9)], resultsByPosition: true } });
  assert.strictEqual(sub._pendingResults, 12);
});

test('runs break at another group hash, epoch, attempt or topic; ids of another form go as they are, once', () => {
  // Another group's hash (the id's first bytes, which the grouping hash skips): never merged.
  const other = (off) => aid(off).replace(HEAD, 'a1ffffffffffffffff');
  const ids = [aid(1), aid(2), other(4), aid(3, 2, 4), aid(4, 2, 4), aid(5, 2, 4, 2), aid(6, 2, 4, 2, 'other'), aid(7),
    aid(3), other(5), aid(4), 'x', aid('008'), aid('009'), 'x', aid(2)];
  const r = codec.encodeAckRanges(ids);
  assert.deepStrictEqual(r.records, [14]);
  assert.deepStrictEqual(plain(r.bufs[0]).ack.ackIds, [aid('1~4'), aid(7), other('4~5'), aid('3~4', 2, 4),
    aid(5, 2, 4, 2), aid(6, 2, 4, 2, 'other'), 'x', aid('008'), aid('009')]);
});

test('an id queued twice in one flush goes once, and both of its acks resolve', async (t) => {
  const { sub, sent, deliver, answer } = harness(t);
  const ms = deliver([0, 1, 2]);
  ms[1].ack();
  const p = ms[1].ackWithResult(); // the same id again
  ms[0].ack();
  ms[2].ack();
  sub.flush();
  assert.deepStrictEqual(ackIds(sent[0]), [aid('0~2')]);
  answer([], 3);
  assert.deepStrictEqual(await states([p]), ['ACCEPTED']);
  // A single id, twice: one plain id.
  const [m] = deliver([40]);
  const q = m.ackWithResult();
  m.ack();
  sub.flush();
  assert.deepStrictEqual(ackIds(sent[1]), [aid(40)]);
  answer([{ ackId: aid(40), status: 4, position: 0 }]);
  assert.deepStrictEqual(await states([q]), ['STALE']);
  assert.strictEqual(sub._pendingResults, 0);
  assert.strictEqual(sub._sent.length - sub._sentHead, 0);
});

test('a message names at most 8000 records: a longer run is cut, each part answered in turn', async (t) => {
  const { sub, sent, deliver, answer } = harness(t, { flushIds: 30000 });
  const N = 20000;
  const ms = deliver(Array.from({ length: N }, (_, i) => i));
  const late = ms[9000].ackWithResult();
  for (let i = N - 1; i >= 0; i--) ms[i].ack();
  sub.flush();
  assert.deepStrictEqual(sent.map(ackIds), [[aid('0~7999')], [aid('8000~15999')], [aid('16000~19999')]]);
  answer([], 8000);
  assert.deepStrictEqual(await states([late]), [undefined], 'its part is the second');
  answer([{ ackId: aid(9000), status: 4, message: 'revoked', position: 0 }], 7999);
  assert.deepStrictEqual(await states([late]), ['STALE']);
  answer([], 4000);
  assert.strictEqual(sub._pendingResults, 0);
  // Runs of different partitions share a message's 8000 records.
  const r = codec.encodeAckRanges([...Array.from({ length: 5000 }, (_, i) => aid(i)),
    ...Array.from({ length: 5000 }, (_, i) => aid(i, 7))]);
  assert.deepStrictEqual(r.records, [8000, 2000]);
  assert.deepStrictEqual(r.bufs.map((b) => plain(b).ack.ackIds), [[aid('0~4999'), aid('0~2999', 7)],
    [aid('3000~4999', 7)]]);
});

test('a refused id among a range resolves only that ack refused', async (t) => {
  const { sub, sent, deliver, answer } = harness(t);
  const ms = deliver([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  const ps = ms.slice(0, 5).map((m) => m.ackWithResult());
  for (const m of ms.slice(5)) m.ack();
  sub.flush();
  assert.deepStrictEqual(ackIds(sent[0]), [aid('0~9')]);
  answer([{ ackId: aid(3), status: 4, message: 'redelivered since', position: 0 },
    { ackId: aid(7), status: 3, position: 0 }], 8);
  assert.deepStrictEqual(await states(ps), ['ACCEPTED', 'ACCEPTED', 'ACCEPTED', 'STALE', 'ACCEPTED']);
  assert.strictEqual(sub._pendingResults, 0);
});

test('answers match their requests in order, not by ids (FIFO over two messages)', async (t) => {
  const { sub, sent, deliver, answer } = harness(t, { flushIds: 4 });
  const a = deliver([0, 1, 2, 3]);
  const b = deliver([10, 11, 12, 13]);
  const pa = a.map((m) => m.ackWithResult()); // the 4th flushes
  const pb = b.map((m) => m.ackWithResult());
  assert.deepStrictEqual(sent.map(ackIds), [[aid('0~3')], [aid('10~13')]]);
  // Both all accepted: the same shape, told apart only by their order.
  answer([], 4);
  assert.deepStrictEqual(await states([...pa, ...pb]), ['ACCEPTED', 'ACCEPTED', 'ACCEPTED', 'ACCEPTED',
    undefined, undefined, undefined, undefined]);
  answer([{ ackId: aid(12), status: 3, message: 'no delivered record has it', position: 0 }], 3);
  assert.deepStrictEqual(await states(pb), ['ACCEPTED', 'ACCEPTED', 'NOT_FOUND', 'ACCEPTED']);
  assert.strictEqual(sub._pendingResults, 0);
});

test('an extension answered before a ranged ack of the same ids is not taken for its answer', async (t) => {
  const { sub, sent, deliver, answer } = harness(t);
  const ms = deliver([0, 1, 2]);
  sub._leaseMargin = 1e9; // every lease is due
  sub._extendLeases();
  const ps = ms.map((m) => m.ackWithResult());
  sub.flush();
  assert.ok(sent[0].modifyDeadline && sent[1].ack.resultsByPosition);
  answer(ms.map((m) => ({ ackId: m.ackId, status: 3 })));
  assert.deepStrictEqual(await states(ps), [undefined, undefined, undefined]);
  answer([], 3);
  assert.deepStrictEqual(await states(ps), ['ACCEPTED', 'ACCEPTED', 'ACCEPTED']);
  assert.strictEqual(sub._pendingResults, 0);
});

test('nacks and acks that wait for their commit keep their per-id requests and answers', async (t) => {
  const { sub, sent, deliver, answer } = harness(t);
  const ms = deliver([0, 1, 2, 3, 4]);
  ms[0].ack();
  ms[1].ack();
  const pc = ms[2].ackWithResult({ waitCommit: true });
  const pn = ms[3].nackWithResult(5);
  ms[4].ack();
  sub.flush();
  assert.deepStrictEqual(sent, [
    { ack: { ackIds: [aid('0~1'), aid(4)], resultsByPosition: true } },
    { ack: { ackIds: [aid(2)], waitCommit: true } },
    { nack: { ackIds: [aid(3)], delayMs: 5 } },
  ]);
  answer([], 3);
  answer([{ ackId: aid(2), status: 1 }]); // taken: it waits for its commit
  answer([{ ackId: aid(3), status: 1 }]);
  assert.deepStrictEqual(await states([pc, pn]), [undefined, 'ACCEPTED']);
  answer([{ ackId: aid(2), status: 5, committedOffset: 3 }]);
  assert.deepStrictEqual(await states([pc]), [{ status: 'COMMITTED', committedOffset: 3, message: '' }]);
  assert.strictEqual(sub._pendingResults, 0);
});

test('a refused waitCommit ack: its second answer is matched to it, not to a ranged ack after it', async (t) => {
  const { sub, sent, deliver, answer, warnings } = harness(t);
  const ms = deliver([0, 1, 2, 3]);
  const pc = ms[0].ackWithResult({ waitCommit: true });
  sub.flush();
  const pr = ms[1].ackWithResult();
  sub.flush();
  assert.deepStrictEqual(sent, [{ ack: { ackIds: [aid(0)], waitCommit: true } },
    { ack: { ackIds: [aid(1)], resultsByPosition: true } }]);
  answer([{ ackId: aid(0), status: 4, message: 'stale' }]); // refused at once
  assert.deepStrictEqual(await states([pc, pr]), [{ status: 'STALE', committedOffset: 0, message: 'stale' },
    undefined]);
  answer([{ ackId: aid(0), status: 4, message: 'stale' }]); // its second answer: every id, as it stands
  assert.deepStrictEqual(await states([pr]), [undefined], 'the ranged ack waits for its own answer');
  answer([{ ackId: aid(1), status: 3, message: 'not found' }]);
  assert.deepStrictEqual(await states([pr]), ['NOT_FOUND']);
  assert.strictEqual(sub._pendingResults, 0);
  assert.strictEqual(sub._commitSent.length, 0);
  assert.strictEqual(sub._sent.length - sub._sentHead, 0);
  // Two in one request, one refused: the second answer names both, and resolves the other.
  const p2 = [ms[2].ackWithResult({ waitCommit: true }), ms[3].ackWithResult({ waitCommit: true })];
  sub.flush();
  answer([{ ackId: aid(2), status: 1 }, { ackId: aid(3), status: 4 }]);
  assert.deepStrictEqual(await states(p2), [undefined, { status: 'STALE', committedOffset: 0, message: '' }]);
  answer([{ ackId: aid(2), status: 5, committedOffset: 3 }, { ackId: aid(3), status: 4 }]);
  assert.deepStrictEqual(await states(p2), [{ status: 'COMMITTED', committedOffset: 3, message: '' },
    { status: 'STALE', committedOffset: 0, message: '' }]);
  assert.strictEqual(sub._pendingResults, 0);
  assert.strictEqual(sub._commitSent.length, 0);
  assert.deepStrictEqual(warnings, []);
});

test('an answer no request fits is matched to none: not to a ranged ack by its record count', async (t) => {
  const { sub, deliver, answer, warnings } = harness(t);
  const ms = deliver([0, 1]);
  const pa = ms[0].ackWithResult();
  sub.flush();
  const pb = ms[1].ackWithResult();
  sub.flush();
  // One record refused, as each ranged ack waits for, but by an id of neither.
  answer([{ ackId: aid(5), status: 4 }]);
  assert.deepStrictEqual(await states([pa, pb]), [undefined, undefined]);
  assert.strictEqual(warnings.length, 1);
  assert.match(warnings[0], /match no request sent/);
  answer([], 1);
  answer([{ ackId: aid(1), status: 3 }]);
  assert.deepStrictEqual(await states([pa, pb]), ['ACCEPTED', 'NOT_FOUND']);
  assert.strictEqual(sub._pendingResults, 0);
});

test('ackRanges: false sends every ack id on its own; ackRanges must be a boolean', async (t) => {
  assert.throws(() => new Subscriber('127.0.0.1:1', { group: 'g', topics: ['t'], ackRanges: 'no' }),
    KsidecarConfigError);
  const { sub, sent, deliver, answer } = harness(t, { ackRanges: false });
  const ms = deliver([0, 1, 2]);
  const ps = ms.map((m) => m.ackWithResult());
  sub.flush();
  assert.deepStrictEqual(sent, [{ ack: { ackIds: [aid(0), aid(1), aid(2)] } }]);
  answer(ms.map((m) => ({ ackId: m.ackId, status: 1 })));
  assert.deepStrictEqual(await states(ps), ['ACCEPTED', 'ACCEPTED', 'ACCEPTED']);
  assert.strictEqual(sub._pendingResults, 0);
});

test('a ksidecar older than ranges refuses a range by its range id: its records so, with a warning', async (t) => {
  const { sub, deliver, answer, warnings } = harness(t);
  const ms = deliver([1, 2, 3, 9]);
  const ps = ms.map((m) => m.ackWithResult());
  sub.flush();
  answer([{ ackId: aid('1~3'), status: 2, message: 'malformed ack id' }, { ackId: aid(9), status: 1 }]);
  assert.deepStrictEqual(await states(ps), ['INVALID', 'INVALID', 'INVALID', 'ACCEPTED']);
  assert.strictEqual(sub._pendingResults, 0);
  assert.strictEqual(warnings.length, 1);
  assert.match(warnings[0], /ackRanges: false/);
});

test('AckResults.accepted decodes', () => {
  const ar = Resp.encode(Resp.fromObject({ ackResults: { results: [{ ackId: aid('0~4'), status: 2, position: 3 }],
    accepted: 7 } })).finish();
  const got = codec.decodeResponse(Buffer.from(ar), null).ackResults;
  assert.strictEqual(got.accepted, 7);
  assert.strictEqual(got.records(), 5);
  assert.deepStrictEqual(got.toArray(), [{ ackId: aid('0~4'), status: 'INVALID', message: '' }]);
});

test('records() counts a range id by its records, looking for its "~" within it only', () => {
  const answerOf = (results) =>
    codec.decodeResponse(Buffer.from(Resp.encode(Resp.fromObject({ ackResults: { results } })).finish()), null)
      .ackResults;
  // Only a later id is a range; messages with a '~' too.
  const got = answerOf([{ ackId: aid(0), status: 4, message: 'a~b' }, { ackId: aid(5), status: 3 },
    { ackId: aid('7~9'), status: 2, message: '~' }, { ackId: 'x~y', status: 2 }, { ackId: aid(12), status: 4 }]);
  assert.strictEqual(got.records(), 7);
  // A large refusal, each with a message: linear (searching each id's '~' to the answer's end
  // took ~0.5 s here).
  const big = answerOf(Array.from({ length: 8000 }, (_, i) => ({ ackId: aid(i), status: 4, message: 'm'.repeat(2000) })));
  const t0 = process.hrtime.bigint();
  assert.strictEqual(big.records(), 8000);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  assert.ok(ms < 150, `records() of 8000 refused ids took ${ms} ms`);
});
