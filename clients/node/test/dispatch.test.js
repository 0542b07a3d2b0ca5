// The ordered dispatcher (lib/dispatch.js) without a server: fake messages, a recording handler.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { Dispatcher } = require('../lib/dispatch');

const tick = () => new Promise((r) => setImmediate(r));

// A dispatcher whose handler records the messages handed to it and whose drop marks them.
function harness(serial = true) {
  const h = { run: [], dropped: [] };
  h.d = new Dispatcher(serial, {
    run: (m) => h.run.push(m),
    drop: (m) => {
      m._settled = true;
      m._dropped = true;
      h.dropped.push(m);
    },
  });
  // What a Subscriber does: marks m settled, then tells the dispatcher.
  h.settle = (m, nack = false, live = true) => {
    m._settled = true;
    h.d.settled(m, nack && live);
  };
  h.done = (m, nack = false) => {
    h.settle(m, nack);
    h.d.returned(m);
  };
  h.add = (...ms) => {
    const r = ms.map((m) => h.d.add(m));
    h.d.pump();
    return r;
  };
  h.offs = (ms) => ms.map((m) => `${m._chain}@${m.offset}`);
  return h;
}

const msg = (chain, offset, gen = 0, partition = 0) => ({
  topic: 't', partition, offset, _chain: chain, _gen: gen, _settled: false, _returned: false, _ch: null,
  _dropped: false,
});
const run = (chain, from, to, gen = 0) => Array.from({ length: to - from + 1 }, (_, i) => msg(chain, from + i, gen));

test('a chain runs one at a time, in order; chains run side by side', async () => {
  const h = harness();
  const a = run(1, 0, 3);
  const b = run(2, 10, 12);
  h.add(...a, ...b);
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '2@10'], 'one of each chain out at once');
  h.done(a[0]);
  await tick();
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '2@10', '1@1']);
  for (const m of [b[0], a[1], b[1], a[2], b[2], a[3]]) {
    h.done(m);
    await tick();
  }
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '2@10', '1@1', '2@11', '1@2', '2@12', '1@3']);
  assert.strictEqual(h.d.chains.size, 0, 'finished chains are forgotten');
});

test('the next waits for both the settle and the handler\'s return, in either order', async () => {
  const h = harness();
  const a = run(1, 0, 2);
  h.add(...a);
  h.d.returned(a[0]); // returned without settling: holds the chain
  await tick();
  assert.strictEqual(h.run.length, 1);
  h.settle(a[0]);
  await tick();
  assert.strictEqual(h.run.length, 2);
  h.settle(a[1]); // settled, still running
  await tick();
  assert.strictEqual(h.run.length, 2);
  h.d.returned(a[1]);
  await tick();
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '1@1', '1@2']);
});

test('a handler that settles and returns at once does not recurse: the pump goes on', () => {
  const d = new Dispatcher(true, {
    run: (m) => {
      order.push(m.offset);
      m._settled = true;
      d.settled(m, false);
      d.returned(m);
    },
    drop: () => assert.fail('nothing is dropped'),
  });
  const order = [];
  for (const m of run(1, 0, 19999)) d.add(m);
  d.pump();
  assert.strictEqual(order.length, 20000);
  assert.ok(order.every((o, i) => o === i));
});

test('a nack drops the later queued records, and fences the later ones of its stream until its result', async () => {
  const h = harness();
  const a = run(1, 0, 4);
  h.add(...a);
  h.done(a[0]);
  await tick();
  h.done(a[1], true); // nack 1: 2, 3, 4 are taken back
  await tick();
  assert.deepStrictEqual(h.offs(h.dropped), ['1@2', '1@3', '1@4']);
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '1@1'], 'nothing of the chain after the nack');
  // A batch ksidecar made before it read the nack: above the nacked offset, same stream.
  assert.deepStrictEqual(h.add(msg(1, 5), msg(1, 6)), [false, false]);
  assert.strictEqual(h.dropped.length, 5);
  // Another chain is not fenced.
  assert.deepStrictEqual(h.add(msg(2, 7)), [true]);
  // The nacked record again: the fence ends, the chain goes on from it.
  const again = run(1, 1, 3);
  assert.deepStrictEqual(h.add(...again), [true, true, true]);
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '1@1', '2@7', '1@1']);
  assert.strictEqual(h.run[3], again[0]);
});

test('a nack\'s result lifts its fence: the chain\'s next records are fresh', async () => {
  const h = harness();
  const a = run(1, 0, 1);
  h.add(...a);
  h.done(a[0], true);
  await tick();
  assert.deepStrictEqual(h.offs(h.dropped), ['1@1']);
  h.d.nackAnswered(a[0]);
  assert.strictEqual(h.d.chains.size, 0, 'nothing left of the chain');
  // The nacked record went to another subscriber, which processed it; the chain came back.
  assert.deepStrictEqual(h.add(msg(1, 5)), [true]);
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '1@5']);
  // A result of a nack that is no longer the fence changes nothing.
  h.done(h.run[1], true);
  h.d.nackAnswered(a[0]);
  assert.deepStrictEqual(h.add(msg(1, 6)), [false]);
});

test('a chain that comes again at or below what was received drops the queued copies (an expired lease)', async () => {
  const h = harness();
  const a = run(1, 0, 5);
  h.add(...a);
  h.add(...run(1, 3, 4)); // 3, 4 again: queued 3, 4, 5 were taken back
  assert.deepStrictEqual(h.offs(h.dropped), ['1@3', '1@4', '1@5']);
  for (let i = 0; i < 5; i++) {
    h.done(h.run[i]);
    await tick();
  }
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '1@1', '1@2', '1@3', '1@4']);
  assert.notStrictEqual(h.run[3], a[3]);
});

test('a lost stream: its queued records are dropped, its fences lifted; the new stream\'s wait for the one out', async () => {
  const h = harness();
  const a = run(1, 0, 3, 0);
  const b = run(2, 0, 1, 0);
  h.add(...a, ...b);
  h.done(b[0], true); // nack: fence on chain 2
  h.d.purge(0);
  assert.deepStrictEqual(h.offs(h.dropped).sort(), ['1@1', '1@2', '1@3', '2@1']);
  const a2 = run(1, 0, 2, 1); // the new stream starts again at 0, while the old 0 is still out
  const b2 = run(2, 1, 1, 1); // above the old nack: its fence went with the stream
  assert.deepStrictEqual(h.add(...a2, ...b2), [true, true, true, true]);
  assert.deepStrictEqual(h.offs(h.run), ['1@0', '2@0', '2@1']);
  h.settle(a[0], false, false); // STALE: its stream is gone
  h.d.returned(a[0]);
  await tick();
  assert.strictEqual(h.run[3], a2[0]);
});

test('stop: nothing more is handed out', async () => {
  const h = harness();
  const a = run(1, 0, 1);
  h.add(...a);
  h.d.stop();
  h.done(a[0]);
  await tick();
  assert.strictEqual(h.run.length, 1);
});

test('iterator form: nothing held; a nack after the chain was forgotten still fences it', () => {
  const h = harness(false);
  const a = run(1, 0, 3);
  assert.deepStrictEqual(h.add(...a), [true, true, true, true]);
  assert.strictEqual(h.run.length, 0, 'the iterator takes them');
  h.d.taken(a[0]);
  h.d.taken(a[1]);
  h.settle(a[0]);
  h.settle(a[1], true); // nack 1: 2 and 3, not yet yielded, go
  assert.deepStrictEqual(h.offs(h.dropped), ['1@2', '1@3']);
  const c = run(1, 4, 4);
  // every queued one was dropped: the chain lives on only by its fence
  assert.deepStrictEqual(h.add(...c), [false]);
  // Chain 2: yielded to the last, forgotten, then nacked, while a new record made a new chain.
  const x = msg(2, 0);
  h.add(x);
  h.d.taken(x);
  assert.ok(!h.d.chains.has(Dispatcher.keyOf(x)));
  h.add(msg(2, 1));
  h.settle(x, true);
  assert.deepStrictEqual(h.offs(h.dropped).slice(-1), ['2@1']);
  assert.deepStrictEqual(h.add(msg(2, 2)), [false], 'the fence is on the live chain');
});

test('chains are told apart by topic, partition and a 64-bit chain id', () => {
  const h = harness();
  h.add(msg(2n ** 63n, 0), msg(2n ** 63n + 1n, 0), msg(1, 0, 0, 0), msg(1, 0, 0, 1));
  assert.strictEqual(h.run.length, 4);
});
