// Publisher: Producer.Produce with publishes batched into few requests.
'use strict';
// publish() queues one record and returns its future; the queue goes out as one
// ProduceRequest when it holds maxBatch records or after flushMs, whichever is first.
//
// @locality the Node event loop
const grpc = require('@grpc/grpc-js');
const conn = require('./connect');
const E = require('./errors');
const json = require('./json');

const DEFAULTS = { flushMs: 1, maxBatch: 500, timeoutMs: 30000 };

const toBuf = (v, what) => {
  if (v == null) return null;
  if (Buffer.isBuffer(v)) return v;
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === 'string') return Buffer.from(v);
  throw new E.KsidecarConfigError(`${what} must be a string, Buffer, Uint8Array or null`);
};

/** new Publisher(target, {token, tls, credentials, flushMs, maxBatch, timeoutMs}). */
class Publisher {
  constructor(target, options = {}) {
    conn.checkTarget(target);
    this.target = target;
    this._o = { ...DEFAULTS, ...options };
    this._md = conn.callMetadata(this._o);
    const Producer = conn.services().Producer;
    try {
      this._client = new Producer(target, conn.channelCredentials(this._o), conn.channelOptions(this._o));
    } catch (e) {
      if (e instanceof E.KsidecarError) throw e;
      throw new E.KsidecarConfigError(`bad target ${JSON.stringify(target)}: ${e.message}`, { cause: e });
    }
    this._queue = [];
    this._timer = null;
    this._closed = false;
  }

  /**
   * Produces one record: value (string/Buffer/null), options {key, headers: {k: v} or
   * [{key, value}], partition}. Resolves with {topic, partition, offset}; rejects with
   * KsidecarProduceError (this record failed) or another KsidecarError (the request did).
   * With valueSchemaId, or valueSubject (and valueSchemaVersion, a number or "latest", the
   * default), value is any JSON-serializable value (a BigInt is written with its digits, for
   * longs beyond Number.MAX_SAFE_INTEGER), which ksidecar writes with that schema
   * of the schema registry in Confluent's wire format; one that does not fit is refused.
   */
  publish(topic, value, { key = null, headers = null, partition = undefined,
    valueSchemaId = 0, valueSubject = '', valueSchemaVersion = '' } = {}) {
    if (this._closed) return Promise.reject(new E.KsidecarClosedError('publish after close()'));
    if (typeof topic !== 'string' || !topic)
      return Promise.reject(new E.KsidecarConfigError('publish: topic must be a non-empty string'));
    let rec;
    try {
      const hs = headers == null ? [] : Array.isArray(headers) ? headers
        : Object.entries(headers).map(([k, v]) => ({ key: k, value: v }));
      const kb = toBuf(key, 'key');
      const schema = valueSchemaId || valueSubject;
      const vb = schema ? null : toBuf(value, 'value');
      rec = {
        topic,
        partition: partition == null ? -1 : partition,
        hasPartition: partition != null,
        key: kb || Buffer.alloc(0),
        keyNull: kb == null,
        value: vb || Buffer.alloc(0),
        valueNull: !schema && vb == null,
        valueJson: schema ? json.stringify(value) : '',
        valueSchemaId,
        valueSubject,
        valueSchemaVersion: String(valueSchemaVersion),
        headers: hs.map((h) => ({ key: String(h.key), value: toBuf(h.value, 'header value') || Buffer.alloc(0) })),
      };
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      this._queue.push({ rec, resolve, reject });
      if (this._queue.length >= this._o.maxBatch) this.flush();
      else if (!this._timer) this._timer = setTimeout(() => this.flush(), this._o.flushMs);
    });
  }

  /** Sends the queued records now. Resolves when their request is answered. */
  flush() {
    if (this._timer) clearTimeout(this._timer);
    this._timer = null;
    const batch = this._queue;
    this._queue = [];
    if (!batch.length) return Promise.resolve();
    return new Promise((done) => {
      const deadline = new Date(Date.now() + this._o.timeoutMs);
      this._client.Produce({ records: batch.map((b) => b.rec) }, this._md.clone(), { deadline }, (err, resp) => {
        if (err) {
          const e = E.fromGrpc(err, this.target, `Produce (${batch.length} records)`);
          for (const b of batch) b.reject(e);
        } else {
          batch.forEach((b, i) => {
            const r = resp.results[i];
            if (!r) b.reject(new E.KsidecarProduceError(`Produce: no result for record ${i} of ${batch.length}`));
            else if (r.error) b.reject(new E.KsidecarProduceError(
              `producing to ${b.rec.topic} failed: ${r.error}`, { code: r.error }));
            else b.resolve({ topic: b.rec.topic, partition: r.partition, offset: r.offset });
          });
        }
        done();
      });
    });
  }

  /** Sends what is queued, waits for it, and closes the channel. */
  async close() {
    this._closed = true;
    await this.flush();
    this._client.close();
  }
}

module.exports = { Publisher };
