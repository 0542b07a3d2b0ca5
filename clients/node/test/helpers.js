// Test fixtures: real ksidecar processes on free ports, kstool, and committed-offset checks.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const http = require('http');
const https = require('https');
const crypto = require('crypto');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const BOOTSTRAP = process.env.KSIDECAR_TEST_BOOTSTRAP;
const BIN = process.env.KSIDECAR_TEST_BIN || path.join(ROOT, 'build', 'ksidecar');
const KSTOOL = process.env.KSIDECAR_TEST_KSTOOL || path.join(ROOT, 'build', 'kstool');
if (!BOOTSTRAP) throw new Error('KSIDECAR_TEST_BOOTSTRAP is not set: run tests/clients/node.sh under tests/kafka/kafka.sh run');

const unique = (p) => `${p}-${crypto.randomBytes(5).toString('hex')}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function kstool(...args) {
  return execFileSync(KSTOOL, args, { encoding: 'utf8', timeout: 300000 });
}

function createTopic(topic, partitions) {
  kstool('create', '-b', BOOTSTRAP, '-t', topic, '-p', String(partitions));
}

function produce(topic, n, partitions, { keys = 0, size = 0 } = {}) {
  const a = ['produce', '-b', BOOTSTRAP, '-t', topic, '-n', String(n), '-p', String(partitions)];
  if (keys) a.push('-k', String(keys));
  if (size) a.push('-s', String(size));
  kstool(...a);
}

/** {partition: offset} lines of kstool (watermarks: the high one; committed: -1001 none). */
function parse(out, col) {
  const r = {};
  for (const line of out.split('\n')) {
    const c = line.trim().split(/\s+/);
    if (c.length > col) r[Number(c[0])] = Number(c[col]);
  }
  return r;
}
const endOffsets = (topic) => parse(kstool('watermarks', '-b', BOOTSTRAP, '-t', topic), 2);
const committed = (group, topic, partitions) =>
  parse(kstool('committed', '-b', BOOTSTRAP, '-t', topic, '-g', group, '-p', String(partitions)), 1);

async function waitFor(pred, timeoutMs, what, intervalMs = 250) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < timeoutMs) {
    last = await pred();
    if (last) return last;
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)}`);
}

/** Waits until the group's committed offsets equal the topic's end offsets; returns both. */
async function waitCommitted(group, topic, partitions, timeoutMs = 30000) {
  const end = endOffsets(topic);
  let got;
  const t0 = Date.now();
  try {
    await waitFor(() => {
      got = committed(group, topic, partitions);
      return Object.keys(end).every((p) => got[p] === end[p]);
    }, timeoutMs, `committed == end offsets of ${topic}`, 300);
  } catch (e) {
    e.message += `\nend: ${JSON.stringify(end)}\ncommitted: ${JSON.stringify(got)}`;
    throw e;
  }
  console.log(`committed == end offsets after ${Date.now() - t0} ms: ${JSON.stringify(end)}`);
  return { end, got };
}

// tls: null (plain HTTP) or {cert, key} (HTTPS, a client certificate for mTLS).
function httpGet(port, p, tls) {
  return new Promise((resolve) => {
    const get = tls ? https.get : http.get; // with tls.cert_file, HTTP is HTTPS too
    const o = { host: '127.0.0.1', port, path: p, timeout: 2000, rejectUnauthorized: false };
    if (tls && tls.cert) Object.assign(o, { cert: fs.readFileSync(tls.cert), key: fs.readFileSync(tls.key) });
    const req = get(o, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', () => resolve(null));
    req.on('timeout', () => req.destroy());
  });
}

// Every ksidecar this process started, killed when it exits however it ends (a test that
// timed out skips its after hooks): no sidecar outlives the suite.
const live = new Set();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1));

/** One real ksidecar process. start() again after kill() reuses the same ports. */
class Sidecar {
  constructor(args = [], healthTls = null) {
    this.args = args;
    this.healthTls = healthTls || (args.some((a) => a.startsWith('--tls.cert_file')) ? {} : null);
    this.proc = null;
    this.logPath = path.join(os.tmpdir(), `ksidecar-node-${process.pid}-${crypto.randomBytes(3).toString('hex')}.log`);
  }

  async start() {
    if (!this.grpcPort) {
      this.grpcPort = await freePort();
      this.httpPort = await freePort();
    }
    this.target = `127.0.0.1:${this.grpcPort}`;
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(BIN, [
      `--kafka.bootstrap.servers=${BOOTSTRAP}`,
      `--http.listen=127.0.0.1:${this.httpPort}`,
      `--grpc.listen=127.0.0.1:${this.grpcPort}`,
      '--commit.interval_ms=200',
      '--kafka.session.timeout.ms=6000',
      '--kafka.heartbeat.interval.ms=500',
      ...this.args,
    ], { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    const proc = this.proc;
    live.add(proc);
    proc.once('exit', () => live.delete(proc));
    let exited = null;
    proc.once('exit', (code, sig) => (exited = `${code}/${sig}`));
    await waitFor(async () => {
      if (exited) throw new Error(`ksidecar exited (${exited}):\n${this.logs()}`);
      const r = await httpGet(this.httpPort, '/healthz', this.healthTls);
      return r && (r.status === 200 || (r.status === 503 && !r.body.includes('not been probed')));
    }, 20000, 'ksidecar /healthz', 100);
    return this;
  }

  logs() {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-5000);
    } catch {
      return '';
    }
  }

  /** SIGKILLs this process (only this one) and waits for it to be gone. */
  async kill(sig = 'SIGKILL') {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill(sig);
    await gone;
  }
}

/** Starts sidecars for a test and kills those still running at its end. */
function sidecars(t) {
  const all = [];
  t.after(async () => {
    for (const s of all) await s.kill();
  });
  return async (args, healthTls) => {
    const s = new Sidecar(args, healthTls);
    all.push(s);
    return s.start();
  };
}

/** A fresh topic with n records of size bytes over partitions; deleted at the test's end. */
function topicWith(t, prefix, partitions, n, opts = {}) {
  const topic = unique(prefix);
  createTopic(topic, partitions);
  if (n) produce(topic, n, partitions, opts);
  t.after(() => {
    try {
      kstool('delete', '-b', BOOTSTRAP, '-t', topic);
    } catch {
      /* the broker keeps it; topics are unique */
    }
  });
  return topic;
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate (CN=node-client), in a temp dir. */
function makeCerts(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ksidecar-node-tls-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const f = (n) => path.join(dir, n);
  const ssl = (...a) => execFileSync('openssl', a, { stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '2',
    '-subj', '/CN=ksidecar-test-ca');
  fs.writeFileSync(f('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  for (const [name, subj, ext] of [['server', '/CN=127.0.0.1', true], ['client', '/O=Acme/CN=node-client', false]]) {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f(`${name}.key`), '-out', f(`${name}.csr`), '-subj', subj);
    ssl('x509', '-req', '-in', f(`${name}.csr`), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
      '-out', f(`${name}.pem`), '-days', '2', ...(ext ? ['-extfile', f('san.ext')] : []));
  }
  return { ca: f('ca.pem'), serverCert: f('server.pem'), serverKey: f('server.key'), clientCert: f('client.pem'),
    clientKey: f('client.key') };
}

/** The usual start of a test: one ksidecar, a topic with n records, a group name. */
async function fixture(t, prefix, partitions, n, topicOpts = {}) {
  const start = sidecars(t);
  const topic = topicWith(t, `node-${prefix}`, partitions, n, topicOpts);
  const sc = await start();
  return { sc, topic, group: unique(`g-${prefix}`), start };
}

module.exports = {
  fixture,
  makeCerts,
  BOOTSTRAP, BIN, KSTOOL, unique, sleep, freePort, kstool, createTopic, produce, endOffsets, committed,
  waitFor, waitCommitted, Sidecar, sidecars, topicWith,
};
