// The Node client (natural per-message ack) beside KafkaJS consuming the same records in a group.
'use strict';
// Usage (a broker at KSIDECAR_TEST_BOOTSTRAP; KSIDECAR_TEST_BIN/KSTOOL default to build/):
//   tests/bench/clients/node/run.sh [--records 200000] [--partitions 8] [--size 100] [--rounds 1]
// Each run is its own child process (its CPU time is the Node process's alone; ksidecar
// runs apart, and its CPU is reported too). Every run consumes the same topic in a fresh
// group and must commit every partition to its end offset; the bench asserts no speed.
// rate = records / (last commit or ack result - first record): the group join (the same
// librdkafka/Kafka join for both) is reported apart as "join".
// For tests/bench/ordered.py: --topic reuses a topic holding the records, --ordering MODE
// starts ksidecar with group.ordering=MODE, --only KIND[,KIND] picks the runs, --order-log
// FILE has each run write its handled records (partition, offset, key or \N, chain; tab-
// separated, in handling order) to FILE after the run, --json prints each run as JSON.
const { spawn, execFileSync, fork } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const http = require('http');
const { performance } = require('perf_hooks');

const ROOT = path.resolve(__dirname, '..', '..', '..', '..');
const BOOT = process.env.KSIDECAR_TEST_BOOTSTRAP;
const BIN = process.env.KSIDECAR_TEST_BIN || path.join(ROOT, 'build', 'ksidecar');
const KSTOOL = process.env.KSIDECAR_TEST_KSTOOL || path.join(ROOT, 'build', 'kstool');

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const uniq = (p) => `${p}-${crypto.randomBytes(4).toString('hex')}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const kstool = (...a) => execFileSync(KSTOOL, a, { encoding: 'utf8', timeout: 1800000 });
const offsets = (out, col) => Object.fromEntries(out.trim().split('\n').map((l) => l.trim().split(/\s+/))
  .map((c) => [c[0], Number(c[col])]));

// ---- the runs (in a child) ----

// With BENCH_ORDER_LOG: the handled records, in handling order, written after the run.
const LOG = process.env.BENCH_ORDER_LOG ? [] : null;
// With BENCH_CALLGRIND=1 (the child run under valgrind --tool=callgrind): the first record
// zeroes callgrind's counters (callgrind_control -z), so the dump at exit holds the records
// from about there on, without the start and the group join; the result's cgZeroAt is the
// number of records handled when callgrind_control returned, an upper bound on those the
// zero left out (take figures as the difference of two runs of different sizes).
let seen = 0;
let cgZeroAt = null;
const logRec = (partition, offset, key) => {
  if (seen++ === 0 && process.env.BENCH_CALLGRIND === '1') {
    spawn('callgrind_control', ['-z', String(process.pid)], { stdio: 'ignore' })
      .on('error', (e) => console.error(`bench: callgrind_control: ${e.message}`))
      .on('exit', (code, signal) => {
        if (code === 0) cgZeroAt = seen;
        else console.error(`bench: callgrind_control -z ended with ${code ?? signal}`);
      });
  }
  if (LOG) LOG.push(`${partition}\t${offset}\t${key === null || key === undefined ? '\\N' : key.toString()}\t0\n`);
};

// The library's defaults (4000 credits and 1000-id ack batches since stop 16: 1.2-1.3x
// the old 1000 and 500 on a quiet machine). BENCH_OPTS (JSON) overrides options.
async function runKsidecar(target, topic, n, events) {
  const { Subscriber } = require('ksidecar');
  const opts = JSON.parse(process.env.BENCH_OPTS || '{}');
  const t0 = Date.now();
  const sub = new Subscriber(target, { group: process.env.BENCH_GROUP, topics: [topic], ...opts });
  let count = 0;
  let first = 0;
  let bytes = 0;
  if (events) {
    await new Promise((resolve, reject) => {
      sub.on('error', reject);
      sub.on('message', (msg) => {
        if (!first) first = Date.now();
        logRec(msg.partition, msg.offset, msg.key);
        bytes += msg.value.length; // the handler: touch the record, then ack it
        msg.ack();
        if (++count === n) resolve();
      });
    });
    await sub.close(); // flushes the acks, waits for their results
  } else {
    for await (const msg of sub) {
      if (!first) first = Date.now();
      logRec(msg.partition, msg.offset, msg.key);
      bytes += msg.value.length; // the handler: touch the record, then ack it
      msg.ack();
      if (++count === n) break; // leaving the loop closes: flushes the acks, waits for results
    }
  }
  const last = Date.now();
  return { join: first - t0, ms: last - first, count, bytes, writes: sub.stats.writes };
}

async function runKafkajs(topic, n, tuned) {
  const { Kafka, logLevel } = require('kafkajs');
  const kafka = new Kafka({ clientId: 'bench', brokers: [BOOT], logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({
    groupId: process.env.BENCH_GROUP,
    ...(tuned ? { maxBytesPerPartition: 10 * 1024 * 1024, maxBytes: 64 * 1024 * 1024, minBytes: 1, maxWaitTimeInMs: 100 } : {}),
    // BENCH_KAFKAJS_OPTS (JSON) overrides consumer options, e.g. a longer sessionTimeout under valgrind
    ...JSON.parse(process.env.BENCH_KAFKAJS_OPTS || '{}'),
  });
  const t0 = Date.now();
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  let count = 0;
  let first = 0;
  let bytes = 0;
  let commits = 0;
  let resolveDone;
  const done = new Promise((r) => (resolveDone = r));
  await consumer.run({
    autoCommit: false,
    partitionsConsumedConcurrently: tuned ? 8 : 1,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      if (!first) first = Date.now();
      for (const m of batch.messages) {
        logRec(batch.partition, m.offset, m.key);
        bytes += m.value.length; // the same handler
        resolveOffset(m.offset);
      }
      if (!batch.messages.length) return;
      const next = (BigInt(batch.lastOffset()) + 1n).toString();
      await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
      commits++;
      count += batch.messages.length;
      await heartbeat();
      if (count >= n) resolveDone();
    },
  });
  await done;
  const last = Date.now();
  await consumer.disconnect();
  return { join: first - t0, ms: last - first, count, bytes, writes: commits };
}

async function child() {
  const [kind, topic, n, target] = process.argv.slice(4);
  const c0 = process.cpuUsage();
  const e0 = performance.eventLoopUtilization();
  const r = kind.startsWith('ksidecar')
    ? await runKsidecar(target, topic, Number(n), kind === 'ksidecar-events')
    : await runKafkajs(topic, Number(n), kind === 'kafkajs-tuned');
  const cpu = process.cpuUsage(c0);
  if (LOG) fs.writeFileSync(process.env.BENCH_ORDER_LOG, LOG.join(''));
  r.elu = Number(performance.eventLoopUtilization(e0).utilization.toFixed(2));
  if (cgZeroAt !== null) r.cgZeroAt = cgZeroAt;
  const out = { ...r, cpuMs: Math.round((cpu.user + cpu.system) / 1000) };
  if (process.send) process.send(out);
  else console.log(JSON.stringify(out));
  process.exit(0);
}

// ---- the driver ----

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function healthy(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/healthz', timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
  });
}

function procCpuMs(pid) {
  // utime + stime of /proc/PID/stat, in ms (clock ticks of 100 Hz)
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

async function waitCommitted(group, topic, parts, ends) {
  const t0 = Date.now();
  for (;;) {
    const got = offsets(kstool('committed', '-b', BOOT, '-t', topic, '-g', group, '-p', String(parts)), 1);
    if (Object.keys(ends).every((p) => got[p] === ends[p])) return Date.now() - t0;
    if (Date.now() - t0 > 60000) throw new Error(`FAIL: group ${group} committed ${JSON.stringify(got)}, end ${JSON.stringify(ends)}`);
    await sleep(200);
  }
}

function runChild(kind, topic, n, target, group) {
  return new Promise((resolve, reject) => {
    const log = arg('order-log', '');
    const c = fork(__filename, ['--child', '', kind, topic, String(n), target || ''], {
      env: { ...process.env, BENCH_GROUP: group, ...(log ? { BENCH_ORDER_LOG: log } : {}) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    let res = null;
    c.on('message', (m) => (res = m));
    c.on('exit', (code) => (res ? resolve(res) : reject(new Error(`${kind} exited with ${code}`))));
  });
}

async function main() {
  if (!BOOT) throw new Error('KSIDECAR_TEST_BOOTSTRAP is not set (tests/kafka/kafka.sh start, or the shared broker)');
  const n = Number(arg('records', 200000));
  const parts = Number(arg('partitions', 8));
  const size = Number(arg('size', 100));
  const rounds = Number(arg('rounds', 1));
  const topic = arg('topic', '') || uniq(`nodebench-${n}`);
  const cmds = [];
  if (!arg('topic', '')) {
    kstool('create', '-b', BOOT, '-t', topic, '-p', String(parts));
    kstool('produce', '-b', BOOT, '-t', topic, '-n', String(n), '-p', String(parts), '-s', String(size), '-N');
    cmds.push(`kstool create -b ${BOOT} -t ${topic} -p ${parts} && kstool produce -b ${BOOT} -t ${topic} -n ${n} -p ${parts} -s ${size} -N`);
  }
  const ends = offsets(kstool('watermarks', '-b', BOOT, '-t', topic), 2);
  const total = Object.values(ends).reduce((a, b) => a + b, 0);
  if (total !== n) throw new Error(`topic ${topic} holds ${total} records, not ${n}`);
  const grpcPort = await freePort();
  const httpPort = await freePort();
  const scArgs = [`--kafka.bootstrap.servers=${BOOT}`, `--grpc.listen=127.0.0.1:${grpcPort}`,
    `--http.listen=127.0.0.1:${httpPort}`, '--log.level=warn', '--subscriber.max_credit_records=100000'];
  if (arg('ordering', '')) scArgs.push(`--group.ordering=${arg('ordering', '')}`);
  const log = path.join(os.tmpdir(), `nodebench-ksidecar-${grpcPort}.log`);
  const fd = fs.openSync(log, 'w');
  const sc = spawn(BIN, scArgs, { stdio: ['ignore', fd, fd] });
  cmds.push(`${BIN} ${scArgs.join(' ')}`);
  try {
    const t0 = Date.now();
    while (!(await healthy(httpPort))) {
      if (Date.now() - t0 > 20000 || sc.exitCode !== null) throw new Error(`ksidecar did not start; see ${log}`);
      await sleep(100);
    }
    const only = arg('only', '');
    const kinds = ['ksidecar-iterator', 'kafkajs-defaults', 'kafkajs-tuned', 'ksidecar-events']
      .filter((k) => !only || only.split(',').includes(k));
    const rows = [];
    for (let r = 0; r < rounds; r++) {
      for (const kind of kinds) {
        const group = uniq(`nodebench-${kind}`);
        const sc0 = procCpuMs(sc.pid);
        const res = await runChild(kind, topic, n, `127.0.0.1:${grpcPort}`, group);
        const commitLag = await waitCommitted(group, topic, parts, ends);
        const row = { round: r + 1, kind, ...res, rate: Math.round(n / (res.ms / 1000)),
          rateAll: Math.round(n / ((res.ms + res.join) / 1000)), commitLag,
          sidecarCpuMs: kind.startsWith('ksidecar') ? procCpuMs(sc.pid) - sc0 : null };
        rows.push(row);
        if (process.argv.includes('--json')) {
          console.log(JSON.stringify(row));
          continue;
        }
        console.log(`round ${row.round} ${kind}: ${row.rate} rec/s (${res.ms} ms after a ${res.join} ms join), ` +
          `node CPU ${res.cpuMs} ms (event loop busy ${Math.round(res.elu * 100)}%)${row.sidecarCpuMs != null ? `, ksidecar CPU ${row.sidecarCpuMs} ms` : ''}, ` +
          `${res.writes} ${kind.startsWith('ksidecar') ? 'stream writes' : 'commits'}, committed == end +${commitLag} ms`);
      }
    }
    if (process.argv.includes('--json')) {
      console.log(JSON.stringify({ commands: cmds }));
      return;
    }
    console.log('\nrec/s A: first record to the last ack result (ksidecar) or commit (KafkaJS); ' +
      'B: from the start, group join included');
    console.log('| round | client | rec/s A | A vs KafkaJS defaults | A vs KafkaJS tuned | rec/s B | ' +
      'B vs KafkaJS defaults | B vs KafkaJS tuned | join ms | Node CPU ms (event loop busy) | ksidecar CPU ms |');
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const row of rows) {
      const base = (k, f) => rows.find((x) => x.round === row.round && x.kind === k)[f];
      const x = (f, k) => `${(row[f] / base(k, f)).toFixed(2)}x`;
      console.log(`| ${row.round} | ${row.kind} | ${row.rate.toLocaleString('en')} | ` +
        `${x('rate', 'kafkajs-defaults')} | ${x('rate', 'kafkajs-tuned')} | ${row.rateAll.toLocaleString('en')} | ` +
        `${x('rateAll', 'kafkajs-defaults')} | ${x('rateAll', 'kafkajs-tuned')} | ` +
        `${row.join} | ${row.cpuMs} (${Math.round(row.elu * 100)}%) | ${row.sidecarCpuMs ?? '-'} |`);
    }
    console.log(`\nnode ${process.version}, ${os.cpus().length} cpus, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    console.log('commands:');
    for (const c of cmds) console.log(`  ${c}`);
    console.log(`  node ${path.relative(ROOT, __filename)} ${process.argv.slice(2).join(' ')}`);
  } finally {
    sc.kill('SIGTERM');
  }
}

if (process.argv[2] === '--child') child().catch((e) => {
  console.error(e);
  process.exit(1);
});
else main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
