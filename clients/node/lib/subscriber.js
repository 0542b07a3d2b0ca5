// Subscriber: one Subscribe stream with batched acks, lease extension, flow control and reconnect.
'use strict';
// Model: Pub/Sub's StreamingPull subscriber. State lives on the event loop (one thread):
// - _batches: the current stream's received batches with unsettled messages; the lease
//   timer extends a batch's unsettled messages together (they arrived together);
// - _ackQ/_nackQ: settles queued for the next flush (every flushMs or flushIds ids);
// - _sent: a FIFO of the requests sent (acks, nacks, extensions) whose AckResults have
//   not come. ksidecar answers each request with one AckResults, its ids in the same
//   order, and answers a stream's requests in the order sent (its group loop settles
//   them in order). So results match the FIFO's head position by position, with no
//   per-id map; the ids are still checked, and a mismatch tries only the oldest request of
//   the other kind (per id, or by position), never a later one of the head's kind.
// - plain acks (not waiting for their commit) go as ack ranges answered by position
//   (ackRanges, on by default): a partition's consecutive offsets as one id
//   "<first>~<last>", answered by a count of the records accepted and a result, by its own
//   id, for each one refused. Such an answer names none of the accepted ids: its entry in
//   the FIFO (RANGED) tells which they were, and how many records it waits for.
// No per-message Map or Promise unless asked for (ackWithResult): at 200k messages a
// second, each allocation per message shows up as garbage-collector time.
// A stream generation (_gen) tags each message; when a stream ends, _gen moves on, and
// acks of older messages resolve STALE here without being sent: their leases ended with
// the stream, and ksidecar delivers those records again.
// Records of an ordering chain (a key, or a partition) go through lib/dispatch.js, which
// keeps their order and drops the copies ksidecar took back.
//
// @locality the Node event loop (no locks: nothing here runs on another thread)
const { EventEmitter } = require('events');
const grpc = require('@grpc/grpc-js');
const codec = require('./codec');
const { Dispatcher } = require('./dispatch');
const conn = require('./connect');
const E = require('./errors');
const json = require('./json');

const DEFAULTS = {
  maxMessages: 4000,
  maxBytes: 10 * 1024 * 1024,
  ackDeadlineMs: 30000,
  maxExtensionMs: 60 * 60 * 1000,
  flushMs: 5,
  flushIds: 1000,
  closeTimeoutMs: 30000,
  connectTimeoutMs: 10000,
  reconnectTimeoutMs: Infinity,
  backoffInitialMs: 100,
  backoffMaxMs: 5000,
  backoffMultiplier: 2,
  subscriber: '',
  ackRanges: true,
  valueFormat: '', // "avro", "avro_plain", "json_schema", "protobuf", "auto", "binary"; "": the group's
  keyFormat: '',
};

// Codes after which a new stream would fail the same way: reported, never retried.
const FATAL = new Set([
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.INVALID_ARGUMENT,
  grpc.status.NOT_FOUND,
  grpc.status.FAILED_PRECONDITION,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.UNIMPLEMENTED,
]);

const ACK = 1;
const NACK = 2;
const identity = (b) => b;

function parseDecoded(d, { bigint = true } = {}) {
  if (!d) return undefined;
  if (d.error) throw new E.KsidecarDecodeError(`not decoded: ${d.error}`);
  return d.json ? json.parse(d.json, bigint) : undefined;
}

/** One delivered record. key/value are Buffers (views of the received message) or null. */
class Message {
  constructor(batch, topic, partition, offset, ts, key, value, headers, idStart, idEnd, attempt, chain,
    keyDecoded = null, valueDecoded = null) {
    this.topic = topic;
    this.partition = partition;
    this.offset = offset;
    this.timestampMs = ts;
    this.key = key;
    this.value = value;
    this.headers = headers;
    this.attempt = attempt;
    this._batch = batch; // its arrival: subscriber, stream, bytes, lease deadline
    this._idStart = idStart; // the ack id is the bytes _idStart.._idEnd, made a string when asked
    this._idEnd = idEnd;
    this._id = null;
    this._settled = false;
    this._chain = chain; // ordering_chain: 0 (none), a Number or a BigInt
    this._ch = null; // its chain in the dispatcher
    this._returned = false; // its handler returned (ordered, event form)
    this._dropped = false; // a copy ksidecar took back, never handed out
    // Set when the key or value is shown in a schema format (options.valueFormat, keyFormat
    // or the group's): { json, format, schemaId, error }; key and value keep the bytes.
    this.keyDecoded = keyDecoded;
    this.valueDecoded = valueDecoded;
  }

  /** The value decoded with its schema, parsed; undefined when it was not shown in a schema
   * format. Integers beyond Number.MAX_SAFE_INTEGER (Avro longs) are BigInt, exact; with
   * { bigint: false }, numbers as JSON.parse rounds them. Throws KsidecarDecodeError when
   * ksidecar could not decode it. */
  valueJson(options) {
    return parseDecoded(this.valueDecoded, options);
  }

  /** The key, as valueJson() has the value. */
  keyJson(options) {
    return parseDecoded(this.keyDecoded, options);
  }

  get _buf() {
    return this._batch.buf;
  }

  get _sub() {
    return this._batch.sub;
  }

  get _gen() {
    return this._batch.gen;
  }

  /** The id ksidecar gave this delivery (for the unary Ack/Nack calls, or logs). */
  get ackId() {
    return this._id || (this._id = this._buf.latin1Slice(this._idStart, this._idEnd));
  }

  /** Its key and value bytes (what flow control counts here). */
  get size() {
    return (this.key ? this.key.length : 0) + (this.value ? this.value.length : 0);
  }

  /** When it arrived (ms since the epoch). */
  get receivedAt() {
    return this._batch.receivedAt;
  }

  /** Acks it (batched). */
  ack() {
    this._sub._settle(this, ACK, 0, '', null);
  }

  /** Nacks it: delivered again after delayMs (batched). */
  nack(delayMs = 0, reason = '') {
    this._sub._settle(this, NACK, delayMs, reason, null);
  }

  /**
   * Acks it; resolves with 'ACCEPTED', 'STALE', 'INVALID' or 'NOT_FOUND'. With
   * {waitCommit: true} it resolves, once a commit the broker confirmed covers the record,
   * with {status: 'COMMITTED', committedOffset, message}; or 'LOST_TO_REBALANCE',
   * 'COMMIT_FAILED', or 'ACCEPTED' when ksidecar's wait (5 s) ended first (taken, not known
   * durable), or a refusal. Such acks go in their own messages.
   */
  ackWithResult(opts) {
    const kind = opts && opts.waitCommit ? ACK_COMMIT : ACK;
    return new Promise((resolve, reject) => this._sub._settle(this, kind, 0, '', [resolve, reject]));
  }

  /** nack() with a future, as ackWithResult(). */
  nackWithResult(delayMs = 0, reason = '') {
    return new Promise((resolve, reject) =>
      this._sub._settle(this, NACK, delayMs, reason, [resolve, reject]));
  }

  /** Rejects it as poison (a nack with dead_letter): ksidecar puts it in the group's
   * dead-letter topic at once, whatever its attempt, with reason in its ksidecar.last_error
   * header. A group without a dead-letter topic delivers it again. */
  deadLetter(reason = '') {
    this._sub._settle(this, NACK, 0, reason, null, true);
  }

  /** deadLetter() with a future, as ackWithResult(). */
  deadLetterWithResult(reason = '') {
    return new Promise((resolve, reject) =>
      this._sub._settle(this, NACK, 0, reason, [resolve, reject], true));
  }
}

// Settles queued for one request: messages, and their waiters (null until one is asked).
class Pending {
  constructor(kind, delayMs, reason, deadLetter = false) {
    this.kind = kind;
    this.delayMs = delayMs;
    this.reason = reason;
    this.deadLetter = deadLetter;
    this.msgs = [];
    this.waiters = null;
    this.records = 0; // RANGED: how many records its request named (copies once)
  }

  push(m, waiter) {
    if (waiter && !this.waiters) this.waiters = new Array(this.msgs.length).fill(null);
    if (this.waiters) this.waiters.push(waiter);
    this.msgs.push(m);
  }

  // Cuts it into requests of at most max ids.
  chunks(max) {
    if (this.msgs.length <= max) return [this];
    const out = [];
    for (let i = 0; i < this.msgs.length; i += max) {
      const c = new Pending(this.kind, this.delayMs, this.reason, this.deadLetter);
      c.msgs = this.msgs.slice(i, i + max);
      c.waiters = this.waiters && this.waiters.slice(i, i + max);
      out.push(c);
    }
    return out;
  }

  // Cuts it into the requests encodeAckRanges made: chunkOf[i] is where msgs[i] went.
  split(chunkOf, n) {
    const out = [];
    for (let c = 0; c < n; c++) out.push(new Pending(this.kind, this.delayMs, this.reason, this.deadLetter));
    for (let i = 0; i < this.msgs.length; i++) out[chunkOf[i]].push(this.msgs[i], this.waiters && this.waiters[i]);
    return out;
  }

  resolveAll(status) {
    if (this.waiters) for (const w of this.waiters) if (w) w[0](answerOf(this.kind, status));
    this.waiters = null;
  }

  rejectAll(err) {
    if (this.waiters) for (const w of this.waiters) if (w) w[1](err);
    this.waiters = null;
  }
}

const EXTEND = 3;
// Plain acks sent as ack ranges, answered by position (a count and the refused ids).
const RANGED = 6;

// What an ack's promise resolves with: its status, or for one that waits for its commit an
// object with the status (the commit point unknown here).
function answerOf(kind, status) {
  return kind === ACK_COMMIT || kind === ACK_COMMITTED ? { status, committedOffset: 0, message: '' } : status;
}
// An ack that waits for its commit: answered at once, and again once committed (the second
// answer's entry is ACK_COMMITTED, matched in _commitSent).
const ACK_COMMIT = 4;
const ACK_COMMITTED = 5;

function checkOptions(o) {
  if (typeof o.group !== 'string' || !o.group)
    throw new E.KsidecarConfigError('options.group: name the consumer group');
  if (!Array.isArray(o.topics) || !o.topics.length || o.topics.some((t) => typeof t !== 'string' || !t))
    throw new E.KsidecarConfigError('options.topics: give a non-empty array of topic names');
  for (const k of ['maxMessages', 'maxBytes', 'ackDeadlineMs', 'maxExtensionMs', 'flushMs', 'flushIds',
    'closeTimeoutMs', 'connectTimeoutMs', 'backoffInitialMs', 'backoffMaxMs']) {
    if (!(typeof o[k] === 'number' && o[k] >= 0))
      throw new E.KsidecarConfigError(`options.${k} must be a number >= 0 (got ${o[k]})`);
  }
  if (o.maxMessages < 1 || o.flushIds < 1 || o.ackDeadlineMs < 1)
    throw new E.KsidecarConfigError('options.maxMessages, flushIds and ackDeadlineMs must be >= 1');
  if (typeof o.ackRanges !== 'boolean')
    throw new E.KsidecarConfigError(`options.ackRanges must be true or false (got ${o.ackRanges})`);
}

/**
 * new Subscriber(target, {group, topics, ...options}); see index.d.ts for every option.
 * Use either `for await (const msg of sub)` or sub.on('message', fn), not both.
 * Events: 'message', 'error' (fatal: the subscriber stopped), 'warning', 'assignment',
 * 'revocation', 'reconnecting', 'connected', 'close'.
 */
class Subscriber extends EventEmitter {
  constructor(target, options = {}) {
    super();
    conn.checkTarget(target);
    this._o = { ...DEFAULTS, ...options };
    checkOptions(this._o);
    this.target = target;
    this._logger = this._o.logger || console;
    this._md = conn.callMetadata(this._o);
    const chOpts = {
      'grpc.initial_reconnect_backoff_ms': this._o.backoffInitialMs,
      'grpc.max_reconnect_backoff_ms': Math.max(this._o.backoffMaxMs, this._o.backoffInitialMs),
      // HTTP/2's default 64 KB receive window holds less than one record batch (1,000
      // records of 100 B is ~150 KB): each batch waited for window updates. grpc-js does
      // no BDP probing, so the window is set here; user channelOptions override it.
      'grpc-node.flow_control_window': 4 * 1024 * 1024,
      ...conn.channelOptions(this._o),
    };
    try {
      this._client = new grpc.Client(target, conn.channelCredentials(this._o), chOpts);
    } catch (e) {
      if (e instanceof E.KsidecarError) throw e;
      throw new E.KsidecarConfigError(`bad target ${JSON.stringify(target)}: ${e.message}`, { cause: e });
    }
    this._gen = 0;
    this._now = Date.now();
    this._call = null;
    this._started = false;
    this._mode = null; // 'iterator' | 'events'
    this._closing = false;
    this._closed = false;
    this._error = null;
    this._everConnected = false;
    this._breaks = 0;
    this._batches = [];
    this._sent = [];
    this._sentHead = 0;
    this._pendingResults = 0;
    this._cackQ = new Pending(ACK_COMMIT, 0, '');
    this._commitSent = [];
    this._ackQ = new Pending(ACK, 0, '');
    this._nackQ = new Map();
    this._queued = 0;
    this._orderWarned = false;
    this._rangeWarned = false;
    this._flushTimer = null;
    this._leaseTimer = null;
    this._queue = [];
    this._qhead = 0;
    this._pull = null; // the iterator's pending next(): [resolve, reject]
    this._idleWaiters = [];
    this._staleWarnedGen = -1;
    this._disp = null; // made by _useMode, serial for the event form
    this.stats = {
      delivered: 0,
      outstandingMessages: 0,
      outstandingBytes: 0,
      maxOutstandingMessages: 0,
      maxOutstandingBytes: 0,
      acksSent: 0,
      nacksSent: 0,
      extensionsSent: 0,
      writes: 0,
      staleLocal: 0,
      reconnects: 0,
      dropped: 0,
    };
    this.on('newListener', (ev) => {
      if (ev === 'message') this._useMode('events');
    });
  }

  _useMode(m) {
    if (this._mode && this._mode !== m)
      throw new E.KsidecarConfigError('use either the async iterator or the message event, not both');
    this._mode = m;
    if (!this._disp) {
      this._disp = new Dispatcher(m === 'events', {
        run: (msg) => this._emit(msg, true),
        drop: (msg) => this._dropUnhanded(msg),
      });
    }
    if (!this._started) process.nextTick(() => this.start());
  }

  /** Opens the stream (done for you by the iterator or the first 'message' listener). */
  start() {
    if (this._started || this._closing) return;
    this._started = true;
    const tick = Math.max(20, Math.min(1000, Math.floor(this._o.ackDeadlineMs / 4)));
    this._leaseTimer = setInterval(() => this._extendLeases(), tick);
    this._leaseMargin = Math.max(2 * tick, Math.floor(this._o.ackDeadlineMs / 3));
    this._connect(Date.now(), 0);
  }

  // ---- the stream ----

  _backoff(attempt) {
    const o = this._o;
    const cap = Math.min(o.backoffMaxMs, o.backoffInitialMs * o.backoffMultiplier ** attempt);
    return cap / 2 + Math.random() * (cap / 2); // jitter: half fixed, half random
  }

  // Waits for the channel, then opens a stream; on failure retries with backoff until
  // connectTimeoutMs (never connected yet) or reconnectTimeoutMs (after a break) ran out.
  _connect(since, attempt) {
    if (this._closing) return;
    const o = this._o;
    const limit = this._everConnected ? o.reconnectTimeoutMs : o.connectTimeoutMs;
    const left = since + limit - Date.now();
    const wait = Math.max(1, Math.min(left, 60000));
    this._client.waitForReady(Date.now() + wait, (err) => {
      if (this._closing) return;
      if (!err) {
        this._open();
        return;
      }
      if (Date.now() - since >= limit) {
        const what = this._everConnected ? `reconnecting for ${limit} ms` : `within ${limit} ms`;
        this._lastError((why) => this._fail(new E.KsidecarConnectError(
          `cannot reach ksidecar at ${this.target} ${what} (connectTimeoutMs/reconnectTimeoutMs): ` +
            `${why || err.message}; check the address and that ksidecar's grpc.listen (and TLS) match`,
          { code: 'UNAVAILABLE', cause: err })));
        return;
      }
      setTimeout(() => this._connect(since, attempt + 1), this._backoff(attempt));
    });
  }

  // waitForReady says only that the deadline passed: one fail-fast call (health Check)
  // gets grpc-js's account of the last connection attempt (refused, TLS handshake, DNS).
  _lastError(cb) {
    if (this._closing) return;
    this._client.makeUnaryRequest('/grpc.health.v1.Health/Check', identity, identity, Buffer.alloc(0),
      this._md.clone(), { deadline: Date.now() + 2000 }, (e) => cb(e ? E.tidy(e.details || e.message) : ''));
  }

  _open() {
    const o = this._o;
    const call = this._client.makeBidiStreamRequest('/ksidecar.v1.Consumer/Subscribe', identity,
      identity, this._md.clone(), {});
    this._call = call;
    this._callDone = false;
    call.on('data', (buf) => {
      if (call === this._call) this._onData(buf);
    });
    call.on('error', () => {}); // reported through 'status'
    call.on('status', (st) => this._onStatus(call, st));
    call.write(codec.encodeOpen({
      group: o.group, topics: o.topics, records: o.maxMessages, bytes: o.maxBytes,
      deadlineMs: o.ackDeadlineMs, subscriber: o.subscriber, orderedBatches: true,
      valueFormat: o.valueFormat, keyFormat: o.keyFormat,
    }));
    this.stats.writes++;
    if (this._gen > 0) this.stats.reconnects++;
    this._everConnected = true;
    this.emit('connected', { generation: this._gen });
  }

  _onStatus(call, st) {
    if (call !== this._call) {
      this._settleIdle();
      return;
    }
    this._call = null;
    if (this._closing) {
      this._broken(null);
      this._settleIdle();
      return;
    }
    const err = Object.assign(new Error(st.details), { code: st.code, details: st.details });
    if (FATAL.has(st.code)) {
      this._fail(E.fromGrpc(err, this.target, `Subscribe (group ${this._o.group})`));
      return;
    }
    const why = `${E.codeName(st.code)}: ${st.details || 'stream ended'}`;
    this._broken(why);
    this.emit('reconnecting', { reason: why });
    const since = Date.now();
    // Breaks in a row (a stream that ends before it delivered anything counts on) back
    // off further each time; a stream that received something starts again from 0.
    const n = this._breaks++;
    setTimeout(() => this._connect(since, n + 1), this._backoff(n));
  }

  // The stream ended: everything of its generation ends with it.
  _broken(why) {
    const gen = this._gen++;
    const unconfirmed = this._pendingResults;
    const unsent = this._queued;
    for (let i = this._sentHead; i < this._sent.length; i++) if (this._sent[i]) this._sent[i].resolveAll('STALE');
    for (const c of this._commitSent) c.resolveAll('STALE');
    this._commitSent = [];
    this._ackQ.resolveAll('STALE');
    this._cackQ.resolveAll('STALE');
    this._cackQ = new Pending(ACK_COMMIT, 0, '');
    for (const n of this._nackQ.values()) n.resolveAll('STALE');
    this._sent = [];
    this._sentHead = 0;
    this._pendingResults = 0;
    this._ackQ = new Pending(ACK, 0, '');
    this._nackQ = new Map();
    this._queued = 0;
    if (this._flushTimer) clearTimeout(this._flushTimer);
    this._flushTimer = null;
    this._batches = [];
    let dropped = 0;
    for (let i = this._qhead; i < this._queue.length; i++) if (!this._queue[i]._dropped) dropped++;
    if (this._disp) this._disp.purge(gen);
    this._queue = [];
    this._qhead = 0;
    this.stats.outstandingMessages = 0;
    this.stats.outstandingBytes = 0;
    if (why)
      this._warn(`Subscribe stream to ${this.target} (group ${this._o.group}, stream ${gen}) ended ` +
        `(${why}); reconnecting with backoff. ${unconfirmed} ack/nack results not yet received ` +
        `(${unsent} of them not yet sent) resolve STALE and ${dropped} buffered messages were ` +
        'dropped: their leases ended with the stream, and ksidecar delivers those records again');
  }

  _fail(err) {
    if (this._error || this._closed) return;
    this._error = err;
    this._closing = true;
    if (this._disp) this._disp.stop();
    this._teardown();
    if (this._pull) {
      const [, reject] = this._pull;
      this._pull = null;
      reject(err);
    }
    if (this.listenerCount('error')) this.emit('error', err);
    else if (this._mode !== 'iterator') this._warn(`stopped: ${err.message}`);
    this._closed = true;
    this.emit('close');
  }

  _teardown() {
    clearInterval(this._leaseTimer);
    const call = this._call;
    this._call = null;
    this._broken(null);
    if (call) call.cancel();
    this._client.close();
  }

  _warn(msg) {
    if (this.listenerCount('warning')) this.emit('warning', msg);
    else this._logger.warn(`ksidecar: ${msg}`);
  }

  // ---- receiving ----

  _onData(buf) {
    this._now = Date.now();
    this._breaks = 0;
    let resp;
    // One arrival: the messages of a batch share it (and are extended together).
    const b = { sub: this, gen: this._gen, buf, msgs: null, left: 0, receivedAt: this._now,
      deadlineAt: this._now + this._o.ackDeadlineMs };
    try {
      resp = codec.decodeResponse(buf, (t, p, off, ts, k, v, h, is, ie, a, ch, kd, vd) =>
        new Message(b, t, p, off, ts, k, v, h, is, ie, a, ch, kd, vd));
    } catch (e) {
      this._warn(`a malformed SubscribeResponse (${e.message}); opening a new stream`);
      if (this._call) this._call.cancel();
      return;
    }
    if (resp.batch) {
      b.msgs = resp.batch;
      b.left = resp.batch.length;
      this._onBatch(b);
    }
    if (resp.ackResults) this._onResults(resp.ackResults);
    if (resp.assignment) this.emit('assignment', resp.assignment);
    if (resp.revocation) this.emit('revocation', resp.revocation);
  }

  _onBatch(b) {
    const st = this.stats;
    const msgs = b.msgs;
    this._batches.push(b);
    for (let i = 0; i < msgs.length; i++) st.outstandingBytes += msgs[i].size;
    st.delivered += msgs.length;
    st.outstandingMessages += msgs.length;
    if (st.outstandingMessages > st.maxOutstandingMessages) st.maxOutstandingMessages = st.outstandingMessages;
    if (st.outstandingBytes > st.maxOutstandingBytes) st.maxOutstandingBytes = st.outstandingBytes;
    if (this._closing) return; // they stay leased until the stream ends, then go back
    const d = this._disp;
    if (this._mode === 'events') {
      for (let i = 0; i < msgs.length; i++) {
        const m = msgs[i];
        if (m._chain) d.add(m); // handed out by its chain, in turn
        else this._emit(m, false);
        if (this._closing) return;
      }
      d.pump();
      return;
    }
    for (let i = 0; i < msgs.length; i++) {
      const m = msgs[i];
      if (!m._chain || d.add(m)) this._queue.push(m);
    }
    if (this._pull) {
      const m = this._take();
      if (m) {
        const [resolve] = this._pull;
        this._pull = null;
        resolve({ value: m, done: false });
      }
    }
  }

  // Calls the 'message' listeners on m. Called here rather than by emit(): a handler that
  // throws or returns a rejected promise gets its message nacked (delivered again at once)
  // and a warning, instead of an uncaught error that would end the process. chained: tell
  // the dispatcher when every listener returned (a returned promise: once it settled).
  _emit(m, chained) {
    const ls = this.listeners('message');
    let wait = 1; // the calls below, as one
    const back = chained ? () => {
      if (--wait === 0) this._disp.returned(m);
    } : null;
    for (let j = 0; j < ls.length; j++) {
      try {
        const r = ls[j].call(this, m);
        if (r && typeof r.then === 'function') {
          if (back) {
            wait++;
            r.then(back, (e) => {
              this._handlerFailed(m, e);
              back();
            });
          } else r.then(undefined, (e) => this._handlerFailed(m, e));
        }
      } catch (e) {
        this._handlerFailed(m, e);
      }
    }
    if (back) back();
  }

  // Ends m, a copy ksidecar took back and never handed out (the dispatcher's drop): no
  // handler, no ack; it no longer counts as outstanding nor has its lease extended.
  _dropUnhanded(m) {
    if (m._settled) return;
    m._settled = true;
    m._dropped = true;
    this.stats.dropped++;
    if (m._gen === this._gen) { // _broken zeroed the counts of an ended stream
      m._batch.left--;
      this.stats.outstandingMessages--;
      this.stats.outstandingBytes -= m.size;
    }
  }

  // The iterator's next message, skipping dropped ones; undefined when none is buffered.
  _take() {
    while (this._qhead < this._queue.length) {
      const m = this._shift();
      if (m._dropped) continue;
      if (m._ch) this._disp.taken(m);
      return m;
    }
    return undefined;
  }

  _handlerFailed(m, e) {
    this._warn(`the message handler failed (${e && e.message ? e.message : e}) on ` +
      `${m.topic}[${m.partition}]@${m.offset}; ${m._settled ? 'it was already settled' : 'nacked'}`);
    if (!m._settled) m.nack();
  }

  _shift() {
    const m = this._queue[this._qhead++];
    if (this._qhead > 1024 && this._qhead * 2 > this._queue.length) {
      this._queue = this._queue.slice(this._qhead);
      this._qhead = 0;
    }
    return m;
  }

  // Finds the sent request these results answer. ksidecar answers each request once, in the
  // order sent: the FIFO's head. Else (not expected) the oldest request outstanding of the
  // answer's kind, if it fits: a per-id answer names its ids (first and last checked); a
  // by-position answer counts its records, and names none but its ids. Never a later one:
  // an answer matched to the wrong request would put every later one off by one.
  _matchSent(results) {
    let records = -1; // of a by-position answer, counted once needed
    const fits = (e) => {
      if (e.kind !== RANGED) return this._perIdFits(e, results);
      if (records < 0) records = results.accepted + (results.length ? results.records() : 0);
      return records === e.records && this._namesOnlyIdsOf(e, results);
    };
    const sent = this._sent;
    if (this._sentHead < sent.length && fits(sent[this._sentHead])) {
      const e = sent[this._sentHead];
      sent[this._sentHead++] = null;
      if (this._sentHead > 256 && this._sentHead * 2 > sent.length) {
        this._sent = sent.slice(this._sentHead);
        this._sentHead = 0;
      }
      return e;
    }
    // The head is the oldest of its kind: look for the oldest of the other kind.
    const headRanged = this._sentHead < sent.length && sent[this._sentHead].kind === RANGED;
    for (let i = this._sentHead + 1; i < sent.length; i++) {
      const e = sent[i];
      if (!e || (e.kind === RANGED) === headRanged) continue;
      if (!fits(e)) return null;
      if (!this._orderWarned) {
        this._orderWarned = true;
        this._warn('ack results came in another order than their requests; matching them by id');
      }
      sent.splice(i, 1);
      return e;
    }
    return null;
  }

  // Whether the per-id results answer the request e: as many, the first and last its ids.
  _perIdFits(e, results) {
    const n = results.length;
    return !results.accepted && n > 0 && e.msgs.length === n && results.idIs(0, e.msgs[0]) &&
      results.idIs(n - 1, e.msgs[n - 1]);
  }

  // Whether each id the by-position results name (refused ones; from a ksidecar older than
  // ranges, each id sent) is one of the ranged acks e's, a range id each of its records.
  _namesOnlyIdsOf(e, results) {
    if (!results.length) return true;
    const ids = new Set();
    for (const m of e.msgs) ids.add(m.ackId);
    for (let i = 0; i < results.length; i++) {
      const id = results.id(i);
      if (ids.has(id)) continue;
      const singles = id.includes('~') ? codec.rangeIds(id) : null;
      if (!singles) return false;
      for (const one of singles) if (!ids.has(one)) return false;
    }
    return true;
  }

  // The entry waiting for the second answer to acks that wait for their commit, if these
  // results are it.
  _matchCommit(results) {
    const n = results.length;
    const c = this._commitSent;
    for (let i = 0; i < c.length; i++) {
      const e = c[i];
      if (e.msgs.length === n && results.idIs(0, e.msgs[0]) && results.idIs(n - 1, e.msgs[n - 1])) {
        c.splice(i, 1);
        return e;
      }
    }
    return null;
  }

  _onResults(results) {
    if (!results.length && !results.accepted) return;
    const e = (this._commitSent.length && results.length && !results.accepted && this._matchCommit(results)) ||
      this._matchSent(results);
    if (!e) {
      this._warn(`${results.length} ack results (first ${results.length ? results.id(0) : 'none'}, ` +
        `${results.accepted} accepted) match no request sent; ignored`);
      return;
    }
    if (e.kind === RANGED) {
      this._pendingResults -= e.msgs.length;
      if (results.length) this._rangedRefused(e, results);
      else e.resolveAll('ACCEPTED');
    } else if (e.kind === EXTEND) {
      for (let i = 0; i < results.length; i++) {
        const m = e.msgs[i];
        const st = results.statuses[i];
        if (st !== 'ACCEPTED' && !m._settled)
          this._warn(`extending the lease of ${m.ackId} (${m.topic}[${m.partition}]@${m.offset}) ` +
            `failed: ${st} ${results.message(i)}; it may be delivered again`);
      }
    } else if (e.kind === ACK_COMMIT || e.kind === ACK_COMMITTED) {
      this._pendingResults -= results.length;
      const w = e.waiters;
      // The second answer names every id of the first (a refused one keeps its status):
      // later keeps each, a refused one (answered now) with no waiter, as the Go and Python
      // clients do; else that answer would match nothing, or the wrong request.
      const later = e.kind === ACK_COMMIT ? new Pending(ACK_COMMITTED, 0, '') : null;
      for (let i = 0; i < results.length; i++) {
        const st = results.statuses[i];
        const wi = w && w[i];
        if (later) later.push(e.msgs[i], st === 'ACCEPTED' ? wi : null);
        if (wi && (!later || st !== 'ACCEPTED'))
          wi[0]({ status: st, committedOffset: results.committedOffset(i), message: results.message(i) });
      }
      if (later && later.msgs.length) this._commitSent.push(later);
    } else {
      this._pendingResults -= results.length;
      if (e.kind === NACK) for (let i = 0; i < results.length; i++) if (e.msgs[i]._ch) this._disp.nackAnswered(e.msgs[i]);
      const w = e.waiters;
      if (w) for (let i = 0; i < results.length; i++) if (w[i]) w[i][0](results.statuses[i]);
    }
    if (this._pendingResults === 0 && this._queued === 0) this._settleIdle();
  }

  // A by-position answer to the ranged acks e that names refused ones: each waiter whose id
  // it names gets that status, the others ACCEPTED. A range refused as a whole (a ksidecar
  // older than ranges answers one by its own id, INVALID) refuses each of its records.
  _rangedRefused(e, results) {
    const refused = new Map(); // id -> result index
    for (let i = 0; i < results.length; i++) {
      if (results.statuses[i] === 'ACCEPTED') continue; // a ksidecar older than ranges names every id
      const id = results.id(i);
      const singles = id.includes('~') ? codec.rangeIds(id) : null;
      if (!singles) {
        refused.set(id, i);
        continue;
      }
      for (const one of singles) refused.set(one, i);
      if (!this._rangeWarned) {
        this._rangeWarned = true;
        this._warn(`the ack range ${id} was refused as a whole: ${results.statuses[i]} ${results.message(i)}` +
          (results.statuses[i] === 'INVALID' ? '; a ksidecar older than ack ranges refuses them: give the ' +
            'Subscriber ackRanges: false' : ''));
      }
    }
    const w = e.waiters;
    e.waiters = null;
    if (w) {
      for (let i = 0; i < w.length; i++) {
        if (!w[i]) continue;
        const k = refused.get(e.msgs[i].ackId);
        w[i][0](k === undefined ? 'ACCEPTED' : results.statuses[k]);
      }
    }
  }

  // ---- settling ----

  _settle(m, kind, delayMs, reason, waiter, deadLetter = false) {
    if (kind === NACK && !(typeof delayMs === 'number' && delayMs >= 0))
      throw new E.KsidecarConfigError(`nack delay must be a number of ms >= 0 (got ${delayMs})`);
    if (m._gen !== this._gen || !this._call) {
      // Its lease ended with an earlier stream (or the subscriber closed): not sent.
      this.stats.staleLocal++;
      if (this._staleWarnedGen !== m._gen) {
        this._staleWarnedGen = m._gen;
        this._warn(`${kind === NACK ? 'nack' : 'ack'} of ${m.ackId} (${m.topic}[${m.partition}]@${m.offset}) ` +
          `is STALE: its lease ended with ${this._closed || this._closing ? 'the closed' : 'an earlier'} ` +
          'stream, and ksidecar delivers the record again (further ones from that stream are not logged)');
      }
      const first = !m._settled;
      m._settled = true;
      if (waiter) waiter[0](answerOf(kind, 'STALE'));
      if (first && m._ch) this._disp.settled(m, false);
      return;
    }
    const first = !m._settled;
    if (first) {
      m._settled = true;
      m._batch.left--;
      this.stats.outstandingMessages--;
      this.stats.outstandingBytes -= m.size;
    }
    if (kind === ACK) this._ackQ.push(m, waiter);
    else if (kind === ACK_COMMIT) {
      this._cackQ.push(m, waiter);
      this._pendingResults++; // answered twice
    } else {
      const k = `${delayMs}\0${deadLetter ? 1 : 0}\0${reason}`;
      let n = this._nackQ.get(k);
      if (!n) this._nackQ.set(k, (n = new Pending(NACK, delayMs, reason, deadLetter)));
      n.push(m, waiter);
    }
    this._pendingResults++;
    if (++this._queued >= this._o.flushIds) this.flush();
    else if (!this._flushTimer) this._flushTimer = setTimeout(() => this.flush(), this._o.flushMs);
    if (first && m._ch) this._disp.settled(m, kind === NACK);
  }

  _send(call, p) {
    const enc = p.kind === ACK ? codec.encodeAck(p.msgs)
      : p.kind === ACK_COMMIT ? codec.encodeAckCommit(p.msgs)
      : p.kind === NACK ? codec.encodeNack(p.msgs, p.delayMs, p.reason, p.deadLetter)
        : codec.encodeExtend(p.msgs, this._o.ackDeadlineMs);
    this._sent.push(p);
    call.write(enc);
    this.stats.writes++;
  }

  /** Sends the queued acks and nacks now. */
  flush() {
    if (this._flushTimer) clearTimeout(this._flushTimer);
    this._flushTimer = null;
    const call = this._call;
    if (!call || this._queued === 0) return;
    const max = this._o.flushIds;
    const q = [this._ackQ, this._cackQ, ...this._nackQ.values()];
    this._ackQ = new Pending(ACK, 0, '');
    this._cackQ = new Pending(ACK_COMMIT, 0, '');
    this._nackQ = new Map();
    this._queued = 0;
    for (const p of q) {
      if (!p.msgs.length) continue;
      if (p.kind === ACK || p.kind === ACK_COMMIT) this.stats.acksSent += p.msgs.length;
      else this.stats.nacksSent += p.msgs.length;
      if (p.kind === ACK && this._o.ackRanges) this._sendRanged(call, p);
      else for (const c of p.chunks(max)) this._send(call, c);
    }
  }

  // Sends the plain acks p as ack ranges answered by position, in requests of at most
  // codec.ACK_RANGE_MAX records.
  _sendRanged(call, p) {
    const r = codec.encodeAckRanges(p.msgs, codec.ACK_RANGE_MAX);
    const parts = r.bufs.length === 1 ? [p] : p.split(r.chunkOf, r.bufs.length);
    for (let c = 0; c < parts.length; c++) {
      const e = parts[c];
      e.kind = RANGED;
      e.records = r.records[c];
      this._sent.push(e);
      call.write(r.bufs[c]);
      this.stats.writes++;
    }
  }

  // Extends the leases that end within the margin, while the message is still unsettled
  // and for at most maxExtensionMs since it arrived.
  _extendLeases() {
    const call = this._call;
    if (!call || this._batches.length === 0) return;
    const now = Date.now();
    const o = this._o;
    const due = new Pending(EXTEND, 0, '');
    let expired = 0;
    let keep = 0;
    const bs = this._batches;
    for (let i = 0; i < bs.length; i++) {
      const b = bs[i];
      if (b.left === 0) continue; // every message settled: dropped
      if (b.deadlineAt - now <= this._leaseMargin) {
        if (now - b.receivedAt >= o.maxExtensionMs) {
          expired += b.left; // not extended again: dropped
          continue;
        }
        b.deadlineAt = now + o.ackDeadlineMs;
        for (const m of b.msgs) if (!m._settled) due.push(m, null);
      }
      bs[keep++] = b;
    }
    bs.length = keep;
    if (expired)
      this._warn(`${expired} messages reached maxExtensionMs (${o.maxExtensionMs} ms) unsettled; ` +
        'their leases are no longer extended, and ksidecar delivers them again when they expire');
    if (!due.msgs.length) return;
    for (const c of due.chunks(o.flushIds)) this._send(call, c);
    this.stats.extensionsSent += due.msgs.length;
  }

  /** Replaces the flow control limits (sent to ksidecar as the stream's credits). */
  setFlowControl({ maxMessages = this._o.maxMessages, maxBytes = this._o.maxBytes } = {}) {
    checkOptions({ ...this._o, maxMessages, maxBytes });
    this._o.maxMessages = maxMessages;
    this._o.maxBytes = maxBytes;
    if (this._call) {
      this._call.write(codec.encodeCreditsRequest(maxMessages, maxBytes));
      this.stats.writes++;
    }
  }

  // ---- closing ----

  _settleIdle() {
    const w = this._idleWaiters;
    this._idleWaiters = [];
    for (const f of w) f();
  }

  /**
   * Stops delivering, sends the queued acks and nacks, waits up to timeoutMs for their
   * results, then ends the stream (unsettled messages go back to ksidecar's pool).
   * Rejects with KsidecarTimeoutError naming how many results did not come (their
   * futures reject with it too); resolves with the stats otherwise.
   */
  close(timeoutMs = this._o.closeTimeoutMs) {
    if (this._closePromise) return this._closePromise;
    this._closePromise = this._close(timeoutMs);
    return this._closePromise;
  }

  async _close(timeoutMs) {
    if (this._closed) return this.stats;
    this._closing = true;
    if (this._disp) this._disp.stop();
    clearInterval(this._leaseTimer);
    this.flush();
    let timedOut = false;
    if (this._call && this._pendingResults > 0) {
      await new Promise((resolve) => {
        const t = setTimeout(() => {
          timedOut = true;
          resolve();
        }, timeoutMs);
        this._idleWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    const pending = this._pendingResults;
    const err = timedOut
      ? new E.KsidecarTimeoutError(`close: ${pending} ack/nack results had not come from ${this.target} ` +
        `after ${timeoutMs} ms; those acks may or may not have been applied`)
      : null;
    if (err) for (let i = this._sentHead; i < this._sent.length; i++) if (this._sent[i]) this._sent[i].rejectAll(err);
    if (err) for (const c of this._commitSent) c.rejectAll(err);
    const call = this._call;
    if (call) {
      // Half-close, so ksidecar ends the stream; cancel if it does not within 2 s.
      await new Promise((resolve) => {
        const t = setTimeout(resolve, 2000);
        this._idleWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
        call.end();
      });
    }
    this._teardown();
    this._closed = true;
    if (this._pull) {
      const [resolve] = this._pull;
      this._pull = null;
      resolve({ value: undefined, done: true });
    }
    this.emit('close');
    if (err) throw err;
    return this.stats;
  }

  // ---- the async iterator ----

  [Symbol.asyncIterator]() {
    this._useMode('iterator');
    return {
      next: () => {
        if (this._error) return Promise.reject(this._error);
        if (this._closing) return Promise.resolve({ value: undefined, done: true });
        const m = this._take();
        if (m) return Promise.resolve({ value: m, done: false });
        return new Promise((resolve, reject) => {
          this._pull = [resolve, reject];
        });
      },
      return: async () => {
        await this.close();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }
}

module.exports = { Subscriber, Message, DEFAULTS };
