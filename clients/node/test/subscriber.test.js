// Subscriber against the real ksidecar binary and the real broker (issue #13's test list).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const net = require('node:net');
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
  const N = 6000;
  const { sc, topic, group } = await h.fixture(t, 'once', 4, N, { size: 100 });
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

test('ackWithResult({waitCommit: true}) resolves once a confirmed commit covers the record', async (t) => {
  const N = 300;
  const { sc, topic, group } = await h.fixture(t, 'wc', 2, N);
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  const waited = [];
  const plain = [];
  for await (const msg of sub) {
    if (msg.offset % 2 === 0) waited.push([msg.partition, msg.offset, msg.ackWithResult({ waitCommit: true })]);
    else plain.push(msg.ackWithResult());
    if (waited.length + plain.length === N) break;
  }
  const got = await Promise.all(waited.map((w) => w[2]));
  const now = h.committed(group, topic, 2);
  got.forEach((r, i) => {
    const [p, off] = waited[i];
    assert.strictEqual(r.status, 'COMMITTED', JSON.stringify(r));
    assert.ok(r.committedOffset > off, `${p}@${off}: ${JSON.stringify(r)}`);
    assert.ok(now[p] >= r.committedOffset, `partition ${p} committed ${now[p]}, answer ${r.committedOffset}`);
  });
  assert.deepStrictEqual((await Promise.all(plain)).filter((s) => s !== 'ACCEPTED'), []);
  await h.waitCommitted(group, topic, 2);
});

test('every record is delivered and acked once (event form)', async (t) => {
  const N = 3000;
  const { sc, topic, group } = await h.fixture(t, 'ev', 3, N);
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

test('a handler slower than the lease deadline: its leases are extended, not redelivered', async (t) => {
  const N = 6;
  const { sc, topic, group } = await h.fixture(t, 'slow', 2, N);
  const deadline = 1500;
  const hold = 6000; // four deadlines
  const sub = new Subscriber(sc.target, { group, topics: [topic], ackDeadlineMs: deadline, logger: quiet });
  const tr = tracker();
  const results = [];
  const t0 = Date.now();
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', async (m) => {
      tr.add(m);
      await h.sleep(hold);
      results.push(await m.ackWithResult());
      if (results.length === N) resolve();
    });
  });
  // Anything redelivered meanwhile would have come by now (its lease expired 4.5 s ago).
  await h.sleep(500);
  const stats = await sub.close();
  console.log(`held ${N} messages ${hold} ms with a ${deadline} ms deadline: ${Date.now() - t0} ms, ` +
    `${stats.extensionsSent} extensions sent`);
  assert.deepStrictEqual(results, Array(N).fill('ACCEPTED'));
  for (const [k, a] of tr.seen) assert.deepStrictEqual(a, [1], `${k} was redelivered: attempts ${a}`);
  assert.strictEqual(tr.seen.size, N);
  assert.ok(stats.extensionsSent >= N, `leases were extended (${stats.extensionsSent})`);
  await h.waitCommitted(group, topic, 2);
});

test('extension stops at maxExtensionMs: the message then comes back', async (t) => {
  const start = h.sidecars(t);
  const topic = h.topicWith(t, 'node-maxext', 1, 1);
  const sc = await start();
  const sub = new Subscriber(sc.target, {
    group: h.unique('g-maxext'), topics: [topic], ackDeadlineMs: 1000, maxExtensionMs: 2000, logger: quiet,
  });
  const t0 = Date.now();
  const seen = [];
  for await (const m of sub) {
    seen.push([m.attempt, Date.now() - t0]);
    if (m.attempt === 1) continue; // never settled: extended up to 2 s, then it expires
    await m.ackWithResult();
    break;
  }
  console.log(`deliveries (attempt, ms): ${JSON.stringify(seen)}`);
  assert.deepStrictEqual(seen.map((s) => s[0]), [1, 2]);
  assert.ok(seen[1][1] >= 2000, `not redelivered before maxExtensionMs (${seen[1][1]} ms)`);
});

test('a nack with a delay: the message comes back after the delay, with attempt 2', async (t) => {
  const { sc, topic, group } = await h.fixture(t, 'nack', 1, 3);
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  const delay = 2500;
  const nackedAt = new Map();
  const back = [];
  for await (const m of sub) {
    if (m.attempt === 1 && m.offset === 1) {
      assert.strictEqual(await m.nackWithResult(delay, 'try later'), 'ACCEPTED');
      nackedAt.set(m.offset, Date.now());
      continue;
    }
    if (m.attempt === 2) back.push([m.offset, Date.now() - nackedAt.get(m.offset)]);
    assert.strictEqual(await m.ackWithResult(), 'ACCEPTED');
    if (back.length === 1) break;
  }
  console.log(`nacked with ${delay} ms delay, back after ${back[0][1]} ms`);
  assert.strictEqual(back[0][0], 1);
  assert.ok(back[0][1] >= delay - 50, `came back no earlier than the delay (${back[0][1]} ms)`);
  await h.waitCommitted(group, topic, 1);
});

test('a handler that throws or rejects: its message is nacked, comes back, and a warning says so', async (t) => {
  const { sc, topic, group } = await h.fixture(t, 'throw', 1, 2);
  const sub = new Subscriber(sc.target, { group, topics: [topic], logger: quiet });
  const warnings = [];
  sub.on('warning', (w) => warnings.push(w));
  const seen = [];
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', async (m) => {
      seen.push([m.offset, m.attempt]);
      if (m.attempt === 1 && m.offset === 0) throw new Error('sync boom');
      if (m.attempt === 1 && m.offset === 1) {
        await h.sleep(10);
        throw new Error('async boom');
      }
      await m.ackWithResult();
      if (seen.filter((x) => x[1] === 2).length === 2) resolve();
    });
  });
  await sub.close();
  console.log(`deliveries (offset, attempt): ${JSON.stringify(seen)}`);
  assert.deepStrictEqual(seen.map((x) => x[1]).sort(), [1, 1, 2, 2]);
  assert.ok(warnings.some((w) => w.includes('sync boom')) && warnings.some((w) => w.includes('async boom')), warnings);
  await h.waitCommitted(group, topic, 1);
});

test('kill -9 of ksidecar mid-stream, then a restart: reconnects by itself, nothing lost', async (t) => {
  const N = 20000;
  const P = 4;
  const { sc, topic, group } = await h.fixture(t, 'kill', P, N, { size: 100 });
  const warnings = [];
  const sub = new Subscriber(sc.target, { group, topics: [topic], maxMessages: 200, logger: quiet });
  sub.on('warning', (w) => warnings.push(w));
  const tr = tracker();
  let held = null;
  let killed = false;
  let staleResult = null;
  const connects = [];
  sub.on('connected', (c) => {
    connects.push(c.generation);
    if (c.generation > 0 && held) held.ackWithResult().then((s) => (staleResult = s));
  });
  const t0 = Date.now();
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', (m) => {
      tr.add(m);
      if (!killed && tr.seen.size >= 5000) {
        killed = true;
        held = m; // left unacked: its ack after the reconnect must be STALE
        sc.kill().then(() => h.sleep(1000)).then(() => sc.start()).catch(reject);
        return;
      }
      m.ack();
      if (tr.seen.size === N) resolve();
    });
  });
  const stats = await sub.close();
  await h.waitFor(() => staleResult, 5000, 'the held ack result');
  const redelivered = [...tr.seen.values()].filter((a) => a.length > 1).length;
  console.log(`${N} records in ${Date.now() - t0} ms across a kill -9; connects ${JSON.stringify(connects)}, ` +
    `${redelivered} delivered more than once, ${stats.staleLocal} acks STALE locally`);
  assert.ok(killed);
  assert.ok(connects.length >= 2, 'a new stream was opened');
  assert.strictEqual(tr.seen.size, N, 'no record missing');
  assert.strictEqual(staleResult, 'STALE');
  assert.ok(warnings.some((w) => /ended .*reconnecting/.test(w)), `the break was reported: ${warnings}`);
  assert.ok(warnings.some((w) => /is STALE/.test(w)), `the stale ack was reported: ${warnings}`);
  await h.waitCommitted(group, topic, P, 60000);
});

test('ksidecar down: connection attempts back off from backoffInitialMs to backoffMaxMs with jitter; then it resumes', async (t) => {
  const N = 2000;
  const P = 4;
  const initial = 50;
  const max = 800;
  const want = 12;
  const { sc, topic, group } = await h.fixture(t, 'backoff', P, N, { size: 100 });
  const sub = new Subscriber(sc.target, {
    group, topics: [topic], maxMessages: 500, backoffInitialMs: initial, backoffMaxMs: max, logger: quiet,
  });
  const seen = new Set();
  let down = false;
  const holding = [];
  sub.on('message', (m) => {
    seen.add(`${m.partition}/${m.offset}`);
    if (!down && seen.size > 600) {
      holding.push(m); // the rest wait for the kill: ksidecar must deliver them again
      return;
    }
    m.ack();
  });
  await h.waitFor(() => seen.size > 600, 30000, '600 records');
  down = true;
  await sc.kill();
  for (const m of holding) m.ack(); // STALE: their stream is gone
  // While ksidecar is down, its port takes TCP connections and drops them at once: each
  // accept is one connection attempt of the Subscriber, at the time it came.
  const port = Number(sc.target.split(':').pop());
  const tries = [];
  const srv = net.createServer((sock) => {
    tries.push(Date.now());
    sock.destroy();
  });
  await new Promise((r, j) => srv.once('error', j).listen(port, '127.0.0.1', r));
  try {
    await h.waitFor(() => tries.length >= want, 60000, `${want} connection attempts`, 20);
  } finally {
    await new Promise((r) => srv.close(r));
  }
  const restartedAt = Date.now();
  await sc.start(); // same ports
  await h.waitCommitted(group, topic, P, 60000);
  const back = Date.now() - restartedAt;
  await sub.close();
  const at = tries.slice(0, want);
  const gaps = at.slice(1).map((x, i) => x - at[i]);
  console.log(`connection attempt gaps (ms): ${JSON.stringify(gaps)}; committed == end ${back} ms after the restart began`);
  assert.ok(gaps[0] < 4 * initial + 100, `first gap ${gaps[0]} ms: the backoff did not start near ${initial} ms`);
  const head = Math.max(...gaps.slice(0, 3));
  const tail = gaps.slice(-4);
  assert.ok(head < Math.min(...tail), `gaps ${JSON.stringify(gaps)} did not grow`);
  for (const g of gaps) assert.ok(g <= max * 1.25 + 150, `gap ${g} ms over the ${max} ms cap (gaps ${JSON.stringify(gaps)})`);
  assert.ok(Math.min(...tail) >= max * 0.75 - 50, `the last gaps ${JSON.stringify(tail)} did not reach the cap`);
  assert.ok(new Set(tail).size > 1, `the last gaps ${JSON.stringify(tail)} are not jittered`);
  assert.strictEqual(seen.size, N);
});

test('close with acks pending: all of them arrive', async (t) => {
  const N = 2000;
  const { sc, topic, group } = await h.fixture(t, 'close', 2, N);
  // Nothing is flushed before close(): a flush timer of a minute and no id bound.
  const sub = new Subscriber(sc.target, {
    group, topics: [topic], flushMs: 60000, flushIds: 100000, maxMessages: N, logger: quiet,
  });
  const futures = [];
  let n = 0;
  await new Promise((resolve, reject) => {
    sub.on('error', reject);
    sub.on('message', (m) => {
      if (++n % 2) m.ack();
      else futures.push(m.ackWithResult());
      if (n === N) resolve();
    });
  });
  assert.strictEqual(sub.stats.acksSent, 0, 'the acks were still pending');
  const t0 = Date.now();
  const stats = await sub.close(20000);
  console.log(`close sent ${stats.acksSent} acks and had their results in ${Date.now() - t0} ms`);
  assert.strictEqual(stats.acksSent, N);
  const st = await Promise.all(futures);
  assert.deepStrictEqual(st.filter((s) => s !== 'ACCEPTED'), []);
  await h.waitCommitted(group, topic, 2);
});

test('flow control: never more outstanding than asked (messages and bytes)', async (t) => {
  const start = h.sidecars(t);
  const N = 400;
  const topic = h.topicWith(t, 'node-flow', 4, N, { size: 100 });
  const sc = await start();
  for (const [maxMessages, maxBytes] of [[10, 10 * 1024 * 1024], [1000, 1000]]) {
    const group = h.unique('g-flow');
    const sub = new Subscriber(sc.target, { group, topics: [topic], maxMessages, maxBytes, logger: quiet });
    let held = [];
    let maxHeld = 0;
    let maxHeldBytes = 0;
    let heldBytes = 0;
    let done = 0;
    const timer = setInterval(() => {
      // Acks what is held every 100 ms: the held set fills to the limit in between.
      for (const m of held) m.ack();
      done += held.length;
      held = [];
      heldBytes = 0;
    }, 100);
    await new Promise((resolve, reject) => {
      sub.on('error', reject);
      sub.on('message', (m) => {
        held.push(m);
        heldBytes += m.value.length;
        maxHeld = Math.max(maxHeld, held.length);
        maxHeldBytes = Math.max(maxHeldBytes, heldBytes);
        if (done + held.length === N) resolve();
      });
    });
    clearInterval(timer);
    for (const m of held) m.ack();
    const stats = await sub.close();
    console.log(`maxMessages ${maxMessages} maxBytes ${maxBytes}: at most ${maxHeld} messages / ` +
      `${maxHeldBytes} value bytes held (library: ${stats.maxOutstandingMessages} / ${stats.maxOutstandingBytes} B)`);
    assert.ok(stats.maxOutstandingMessages <= maxMessages, `${stats.maxOutstandingMessages} > ${maxMessages}`);
    assert.ok(stats.maxOutstandingBytes <= maxBytes, `${stats.maxOutstandingBytes} B > ${maxBytes}`);
    assert.ok(maxHeld <= maxMessages && maxHeldBytes <= maxBytes);
    if (maxMessages === 10) assert.strictEqual(maxHeld, 10, 'the limit, not the broker, bounded it');
    await h.waitCommitted(group, topic, 4);
  }
});

test('a bad token gives a clear error; the right one works', async (t) => {
  const fs = require('fs');
  const os = require('os');
  const path = require('path');
  const crypto = require('crypto');
  const start = h.sidecars(t);
  const topic = h.topicWith(t, 'node-auth', 1, 5);
  const file = path.join(os.tmpdir(), `${h.unique('tokens')}.json`);
  const sha = crypto.createHash('sha256').update('s3cret').digest('hex');
  fs.writeFileSync(file, JSON.stringify({ tokens: [{ sha256: sha, groups: ['*'], consume: ['*'], produce: ['*'] }] }));
  t.after(() => fs.rmSync(file, { force: true }));
  const sc = await start([`--auth.tokens_file=${file}`]);
  const group = h.unique('g-auth');
  const bad = new Subscriber(sc.target, { group, topics: [topic], token: 'wrong', logger: quiet });
  const err = await (async () => {
    try {
      for await (const m of bad) void m;
    } catch (e) {
      return e;
    }
    return null;
  })();
  console.log(`bad token: ${err && err.name}: ${err && err.message}`);
  assert.ok(err instanceof KsidecarAuthError, `a KsidecarAuthError, got ${err}`);
  assert.strictEqual(err.code, 'UNAUTHENTICATED');
  assert.match(err.message, /refused the credentials.*token/);
  const good = new Subscriber(sc.target, { group, topics: [topic], token: 's3cret', logger: quiet });
  for await (const m of good) {
    assert.strictEqual(await m.ackWithResult(), 'ACCEPTED');
    break;
  }
  const pub = new Publisher(sc.target, { token: 'wrong' });
  await assert.rejects(pub.publish(topic, 'x'), (e) => e instanceof KsidecarAuthError);
  await pub.close();
});

test('a bad target gives a clear error', async () => {
  const port = await h.freePort(); // nothing listens there
  const target = `127.0.0.1:${port}`;
  const t0 = Date.now();
  const sub = new Subscriber(target, { group: 'g', topics: ['t'], connectTimeoutMs: 1500, logger: quiet });
  const err = await new Promise((resolve) => {
    sub.on('error', resolve);
    sub.on('message', () => resolve(null));
  });
  console.log(`bad target after ${Date.now() - t0} ms: ${err && err.name}: ${err && err.message}`);
  assert.ok(err instanceof KsidecarConnectError, `a KsidecarConnectError, got ${err}`);
  assert.ok(err.message.includes(`cannot reach ksidecar at ${target}`), err.message);
  const pub = new Publisher(target);
  await assert.rejects(pub.publish('t', 'x'), (e) => e instanceof KsidecarConnectError && e.message.includes(target));
  await pub.close();
  assert.throws(() => new Subscriber('', { group: 'g', topics: ['t'] }), /target must be/);
  assert.throws(() => new Subscriber(target, { group: 'g', topics: [] }), /options.topics/);
});

test('Publisher: records land where it says, with keys and headers', async (t) => {
  const start = h.sidecars(t);
  const topic = h.topicWith(t, 'node-pub', 2, 0);
  const sc = await start();
  const pub = new Publisher(sc.target);
  const res = await Promise.all(Array.from({ length: 50 }, (_, i) =>
    pub.publish(topic, `v${i}`, { key: `k${i % 5}`, headers: { n: String(i) } })));
  await pub.close();
  const byKey = new Map(res.map((r, i) => [`${r.partition}/${r.offset}`, i]));
  assert.strictEqual(byKey.size, 50);
  const sub = new Subscriber(sc.target, { group: h.unique('g-pub'), topics: [topic], logger: quiet });
  let n = 0;
  for await (const m of sub) {
    const i = byKey.get(`${m.partition}/${m.offset}`);
    assert.strictEqual(m.value.toString(), `v${i}`);
    assert.strictEqual(m.key.toString(), `k${i % 5}`);
    assert.deepStrictEqual(m.headers.map((x) => [x.key, x.value.toString()]), [['n', String(i)]]);
    m.ack();
    if (++n === 50) break;
  }
});

test('TLS with a client certificate (mTLS) works; no certificate or plaintext give a clear error', async (t) => {
  const c = h.makeCerts(t);
  const start = h.sidecars(t);
  const topic = h.topicWith(t, 'node-tls', 1, 3);
  const sc = await start([`--tls.cert_file=${c.serverCert}`, `--tls.key_file=${c.serverKey}`,
    `--tls.client_ca_file=${c.ca}`], { cert: c.clientCert, key: c.clientKey });
  const group = h.unique('g-tls');
  const tls = { rootCerts: c.ca, certChain: c.clientCert, privateKey: c.clientKey };
  const pub = new Publisher(sc.target, { tls });
  const r = await pub.publish(topic, 'over-tls');
  await pub.close();
  const sub = new Subscriber(sc.target, { group, topics: [topic], tls, logger: quiet });
  let seen = 0;
  for await (const m of sub) {
    assert.strictEqual(await m.ackWithResult(), 'ACCEPTED');
    if (m.offset === r.offset) assert.strictEqual(m.value.toString(), 'over-tls');
    if (++seen === 4) break;
  }
  await h.waitCommitted(group, topic, 1);
  for (const [what, opts] of [['no client certificate', { tls: { rootCerts: c.ca } }], ['plaintext', {}]]) {
    const bad = new Subscriber(sc.target, { group, topics: [topic], connectTimeoutMs: 2000, logger: quiet, ...opts });
    const err = await new Promise((resolve) => {
      bad.on('error', resolve);
      bad.on('message', () => resolve(null));
    });
    console.log(`${what}: ${err && err.name}: ${err && err.message}`);
    assert.ok(err instanceof KsidecarConnectError || err instanceof KsidecarAuthError, `${what}: got ${err}`);
    assert.ok(err.message.includes(sc.target), err.message);
  }
});
