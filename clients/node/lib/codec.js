// The Subscribe stream's wire codec: SubscribeRequest encoders and a SubscribeResponse decoder.
'use strict';
// Written by hand, as the server's C does, because this is the hot path: a generic
// protobuf decode builds an object per record and per field, then the library would
// build its own Message from it. Here one pass over the bytes builds the Message
// directly, and key/value are views into the received buffer (no copy). The field
// numbers are proto/ksidecar/v1/consumer.proto's; test/codec.test.js checks both
// directions against protobufjs loaded from that file, so a drift fails a test.
//
// @locality any (pure functions)

// ---- encoding ----

function varintLen(v) {
  if (v < 0) return 10; // int64/int32 negatives are 10 bytes on the wire
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}

function putVarint(buf, pos, v) {
  if (v < 0) {
    let b = BigInt.asUintN(64, BigInt(v));
    while (b >= 128n) {
      buf[pos++] = Number(b & 127n) | 128;
      b >>= 7n;
    }
    buf[pos++] = Number(b);
    return pos;
  }
  while (v >= 128) {
    buf[pos++] = (v % 128) | 128;
    v = Math.floor(v / 128);
  }
  buf[pos++] = v;
  return pos;
}

// A field list is [[fieldNo, kind, value], ...] with kind 'v' (varint), 's' (string),
// 'm' (an already encoded sub-message Buffer). Zero/empty values are left out (proto3).
function encodeFields(fields) {
  let size = 0;
  const parts = [];
  for (const [no, kind, val] of fields) {
    if (kind === 'v') {
      if (!val) continue;
      size += varintLen(no << 3) + varintLen(val);
      parts.push([no, kind, val]);
    } else {
      const b = kind === 's' ? Buffer.from(val, 'utf8') : val;
      if (kind === 's' && b.length === 0) continue;
      size += varintLen((no << 3) | 2) + varintLen(b.length) + b.length;
      parts.push([no, kind, b]);
    }
  }
  const buf = Buffer.allocUnsafe(size);
  let pos = 0;
  for (const [no, kind, val] of parts) {
    if (kind === 'v') {
      pos = putVarint(buf, pos, no << 3);
      pos = putVarint(buf, pos, val);
    } else {
      pos = putVarint(buf, pos, (no << 3) | 2);
      pos = putVarint(buf, pos, val.length);
      val.copy(buf, pos);
      pos += val.length;
    }
  }
  return buf;
}

function encodeCredits(records, bytes) {
  return encodeFields([
    [1, 'v', records || 0],
    [2, 'v', bytes || 0],
  ]);
}

/** SubscribeRequest{open}. */
function encodeOpen({ group, topics, records, bytes, deadlineMs, subscriber, orderedBatches,
  valueFormat, keyFormat }) {
  const open = encodeFields([
    [1, 's', group],
    ...topics.map((t) => [2, 's', t]),
    [3, 'm', encodeCredits(records, bytes)],
    [4, 'v', deadlineMs || 0],
    [5, 's', subscriber || ''],
    [6, 'v', orderedBatches ? 1 : 0],
    [7, 's', valueFormat || ''],
    [8, 's', keyFormat || ''],
  ]);
  return encodeFields([[1, 'm', open]]);
}

/** SubscribeRequest{credits}. */
function encodeCreditsRequest(records, bytes) {
  return encodeFields([[5, 'm', encodeCredits(records, bytes)]]);
}

// Ack ids are ASCII (the server makes them); encoded with latin1 straight into one
// buffer: this runs for every few hundred acks. ids: strings, or received records
// (objects with _buf/_idStart/_idEnd: their ids are copied from the received bytes, so
// no id string is made for a record nobody asked the ackId of). flag: NackIds.dead_letter.
function encodeIds(kind, ids, num, reason, flag) {
  const raw = typeof ids[0] !== 'string';
  let body = 0;
  for (let i = 0; i < ids.length; i++) {
    const l = raw ? ids[i]._idEnd - ids[i]._idStart : ids[i].length;
    body += 1 + varintLen(l) + l;
  }
  const rb = reason ? Buffer.from(reason, 'utf8') : null;
  if (num) body += 1 + varintLen(num);
  if (rb && rb.length) body += 1 + varintLen(rb.length) + rb.length;
  if (flag) body += 2;
  const buf = Buffer.allocUnsafe(1 + varintLen(body) + body);
  let pos = 0;
  buf[pos++] = (kind << 3) | 2;
  pos = putVarint(buf, pos, body);
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    buf[pos++] = (1 << 3) | 2;
    if (raw) {
      pos = putVarint(buf, pos, id._idEnd - id._idStart);
      pos += id._buf.copy(buf, pos, id._idStart, id._idEnd);
    } else {
      pos = putVarint(buf, pos, id.length);
      pos += buf.latin1Write(id, pos);
    }
  }
  if (num) {
    buf[pos++] = 2 << 3;
    pos = putVarint(buf, pos, num);
  }
  if (rb && rb.length) {
    buf[pos++] = (3 << 3) | 2;
    pos = putVarint(buf, pos, rb.length);
    rb.copy(buf, pos);
    pos += rb.length;
  }
  if (flag) {
    buf[pos++] = 4 << 3;
    buf[pos++] = 1;
  }
  return buf;
}

/** SubscribeRequest{ack}. */
const encodeAck = (ids) => encodeIds(2, ids, 0, null);
/** SubscribeRequest{ack} with wait_commit (AckIds field 2) set. */
const encodeAckCommit = (ids) => encodeIds(2, ids, 1, null);
/** SubscribeRequest{nack}. */
const encodeNack = (ids, delayMs, reason, deadLetter) => encodeIds(3, ids, delayMs, reason, deadLetter);
/** SubscribeRequest{modify_deadline}. */
const encodeExtend = (ids, deadlineMs) => encodeIds(4, ids, deadlineMs, null);

// ---- ack ranges ----

/** The most records an AckIds with ack ranges may name (ksidecar's KS_ACK_RANGE_MAX): its
 * answer, a result for each refused record, must fit one gRPC message. */
const ACK_RANGE_MAX = 8000;

// Per-id scratch of encodeAckRanges, grown as needed (one thread; once per flush, so no
// allocation per id): the offset field's start and end in the id's buffer, the offset, the
// id's group and the request it went in; order: the ids by group, then offset.
let idS = new Int32Array(1024);
let idE = new Int32Array(1024);
let idOff = new Float64Array(1024);
let idG = new Int32Array(1024);
let idC = new Int32Array(1024);
let order = new Int32Array(1024);
let rout = Buffer.allocUnsafe(64 * 1024); // the entries written, before their request's header

// Finds the offset field of the id at buf[a..z), "a1<16 hex digits>-<epoch>-<partition>-
// <offset>-<attempt>-<topic>", into idS/idE/idOff[i]. Returns false for an id of another form
// (sent as it is), as the Python and Go clients do; so does an offset with a leading zero, or
// of more than 15 digits (a Number is exact only up to 2^53).
function offsetField(buf, a, z, i) {
  if (z - a < 20 || buf[a] !== 0x61 || buf[a + 1] !== 0x31 || buf[a + 18] !== 0x2d) return false;
  let p = a + 19;
  for (let f = 0; f < 2; f++) { // epoch, partition: not empty
    const q = p;
    while (p < z && buf[p] !== 0x2d) p++;
    if (p === q || p === z) return false;
    p++;
  }
  const s = p;
  let off = 0;
  while (p < z && buf[p] >= 0x30 && buf[p] <= 0x39) off = off * 10 + buf[p++] - 0x30;
  if (p === s || p === z || buf[p] !== 0x2d || p - s > 15 || (buf[s] === 0x30 && p - s > 1)) return false;
  idS[i] = s;
  idE[i] = p;
  idOff[i] = off;
  return true;
}

// The id ids[i] and ids[r] are the same but for their offsets.
function sameButOffset(ids, i, r) {
  const x = ids[i];
  const y = ids[r];
  const xb = x._buf;
  const yb = y._buf;
  const xa = x._idStart;
  const ya = y._idStart;
  const head = idS[i] - xa;
  const tail = x._idEnd - idE[i];
  if (head !== idS[r] - ya || tail !== y._idEnd - idE[r]) return false;
  for (let k = 0; k < head; k++) if (xb[xa + k] !== yb[ya + k]) return false;
  const xe = idE[i];
  const ye = idE[r];
  for (let k = 0; k < tail; k++) if (xb[xe + k] !== yb[ye + k]) return false;
  return true;
}

// A hash of the id ids[i] but for its offset (from the epoch on: what comes before is the
// same for every id of a stream). FNV-1a; sameButOffset settles a collision.
function hashButOffset(ids, i) {
  const m = ids[i];
  const b = m._buf;
  let h = 2166136261;
  for (let k = m._idStart + 19, s = idS[i]; k < s; k++) h = Math.imul(h ^ b[k], 16777619);
  for (let k = idE[i], z = m._idEnd; k < z; k++) h = Math.imul(h ^ b[k], 16777619);
  return h;
}

// The digits of v, a whole number >= 0.
function decLen(v) {
  let n = 1;
  for (; v >= 10; v = Math.floor(v / 10)) n++;
  return n;
}

// Writes v (a whole number >= 0) in decimal at pos; returns the end.
function putDec(buf, pos, v) {
  const n = decLen(v);
  for (let k = pos + n - 1; k >= pos; k--) {
    buf[k] = 0x30 + (v % 10);
    v = Math.floor(v / 10);
  }
  return pos + n;
}

// Room for len more bytes at pos in rout; returns rout (replaced by a larger copy if needed).
function routRoom(pos, len) {
  if (pos + len <= rout.length) return rout;
  const b = Buffer.allocUnsafe(Math.max(2 * rout.length, pos + len));
  rout.copy(b, 0, 0, pos);
  rout = b;
  return b;
}

// SubscribeRequest{ack: AckIds{the entries rout[from..to), results_by_position}}.
function rangedRequest(from, to) {
  const body = to - from + 2;
  const buf = Buffer.allocUnsafe(1 + varintLen(body) + body);
  buf[0] = (2 << 3) | 2;
  let pos = putVarint(buf, 1, body);
  pos += rout.copy(buf, pos, from, to);
  buf[pos++] = 4 << 3;
  buf[pos] = 1;
  return buf;
}

/**
 * Plain acks as ack ranges answered by position: SubscribeRequest{ack: AckIds{ack_ids,
 * results_by_position}}. ids: received records (objects with _buf/_idStart/_idEnd) or
 * strings. The ids are grouped by all their text but the offset (a partition's records of
 * one epoch and attempt), each group where its first id was, its offsets in order; an id
 * given twice goes once; each run of consecutive offsets goes as one range id,
 * "<first>~<last>" in the offset's place, a run of one as the id itself; an id of another
 * form goes as it is, once. Concurrent handlers ack a batch's partitions interleaved, and a
 * partition's records out of order: hence the grouping rather than runs as acked.
 * Returns {bufs, records, chunkOf}: the requests, each naming at most max (<=
 * ACK_RANGE_MAX) records, and how many records each names; chunkOf[i] is the index of the
 * request ids[i] went in, or null when there is one request.
 */
function encodeAckRanges(ids, max = ACK_RANGE_MAX) {
  const n = ids.length;
  if (typeof ids[0] === 'string')
    ids = ids.map((s) => ({ _buf: Buffer.from(s, 'latin1'), _idStart: 0, _idEnd: s.length }));
  if (idS.length < n) {
    const c = Math.max(n, 2 * idS.length);
    idS = new Int32Array(c);
    idE = new Int32Array(c);
    idOff = new Float64Array(c);
    idG = new Int32Array(c);
    idC = new Int32Array(c);
    order = new Int32Array(c);
  }
  // Groups: their first id (rep), size, last offset seen, whether their offsets came in
  // increasing order, and the next group of the same hash; an id of another form is a
  // group of its own (rep -1 - i), shared with its copies.
  const gRep = [];
  const gCount = [];
  const gLast = [];
  const gSorted = [];
  const gNext = [];
  const byHash = new Map();
  let byText = null; // ids of another form, as text: their group
  let last = -1; // the group of the id before
  let together = true; // each group's ids next to each other already
  for (let i = 0; i < n; i++) {
    const m = ids[i];
    let g;
    if (!offsetField(m._buf, m._idStart, m._idEnd, i)) {
      const t = m._buf.latin1Slice(m._idStart, m._idEnd);
      g = (byText || (byText = new Map())).get(t);
      if (g === undefined) {
        g = gRep.length;
        byText.set(t, g);
        gRep.push(-1 - i);
        gCount.push(0);
        gLast.push(0);
        gSorted.push(true);
        gNext.push(-1);
      } else if (g !== last) together = false;
      gCount[g]++;
      idG[i] = g;
      last = g;
      continue;
    }
    if (last >= 0 && gRep[last] >= 0 && sameButOffset(ids, i, gRep[last])) g = last;
    else {
      const h = hashButOffset(ids, i);
      const first = byHash.get(h);
      g = first === undefined ? -1 : first;
      while (g >= 0 && !sameButOffset(ids, i, gRep[g])) g = gNext[g];
      if (g < 0) {
        g = gRep.length;
        gRep.push(i);
        gCount.push(0);
        gLast.push(0);
        gSorted.push(true);
        gNext.push(first === undefined ? -1 : first);
        byHash.set(h, g);
      } else together = false; // a group seen before, not just before
    }
    if (gCount[g] && idOff[i] <= gLast[g]) gSorted[g] = false;
    gLast[g] = idOff[i];
    gCount[g]++;
    idG[i] = g;
    last = g;
  }
  // Order: each group's ids together (a stable counting sort, groups in order of first
  // appearance), then a group whose offsets did not come increasing sorted by offset.
  const G = gRep.length;
  const start = new Array(G + 1);
  start[0] = 0;
  for (let g = 0; g < G; g++) start[g + 1] = start[g] + gCount[g];
  if (together) for (let i = 0; i < n; i++) order[i] = i;
  else {
    const next = start.slice(0, G);
    for (let i = 0; i < n; i++) order[next[idG[i]]++] = i;
  }
  for (let g = 0; g < G; g++)
    if (!gSorted[g]) order.subarray(start[g], start[g + 1]).sort((x, y) => idOff[x] - idOff[y]);
  // Entries into rout; a request ends where the next run would pass max records.
  const bufs = [];
  const records = [];
  let pos = 0;
  let from = 0;
  let inReq = 0; // records in the request being written
  const cut = () => {
    bufs.push(rangedRequest(from, pos));
    records.push(inReq);
    from = pos;
    inReq = 0;
  };
  for (let g = 0; g < G; g++) {
    let k = start[g];
    const end = start[g + 1];
    if (gRep[g] < 0) { // an id of another form, with its copies
      if (inReq === max) cut();
      const m = ids[-1 - gRep[g]];
      const len = m._idEnd - m._idStart;
      const b = routRoom(pos, 6 + len);
      b[pos++] = (1 << 3) | 2;
      pos = putVarint(b, pos, len);
      pos += m._buf.copy(b, pos, m._idStart, m._idEnd);
      inReq++;
      for (; k < end; k++) idC[order[k]] = bufs.length;
      continue;
    }
    while (k < end) {
      if (inReq === max) cut();
      const room = max - inReq;
      const i0 = order[k++];
      const first = idOff[i0];
      let top = first;
      idC[i0] = bufs.length;
      while (k < end) {
        const j = order[k];
        const o = idOff[j];
        if (o !== top && (o !== top + 1 || top - first + 1 >= room)) break;
        top = o; // the next offset, or a copy of this one
        idC[j] = bufs.length;
        k++;
      }
      const m = ids[i0];
      const src = m._buf;
      const a = m._idStart;
      const z = m._idEnd;
      if (top === first) { // a run of one: the id itself
        const b = routRoom(pos, 6 + z - a);
        b[pos++] = (1 << 3) | 2;
        pos = putVarint(b, pos, z - a);
        pos += src.copy(b, pos, a, z);
      } else {
        const s = idS[i0];
        const e = idE[i0];
        const len = s - a + decLen(first) + 1 + decLen(top) + z - e;
        const b = routRoom(pos, 6 + len);
        b[pos++] = (1 << 3) | 2;
        pos = putVarint(b, pos, len);
        pos += src.copy(b, pos, a, s);
        pos = putDec(b, pos, first);
        b[pos++] = 0x7e; // '~'
        pos = putDec(b, pos, top);
        pos += src.copy(b, pos, e, z);
      }
      inReq += top - first + 1;
    }
  }
  if (inReq) cut();
  return { bufs, records, chunkOf: bufs.length > 1 ? idC.slice(0, n) : null };
}

/** The single ids of a range id (encodeAckRanges' form), or null for any other id. */
function rangeIds(id) {
  const p = id.split('-');
  if (p.length < 5) return null;
  const r = /^(\d+)~(\d+)$/.exec(p[3]);
  if (!r) return null;
  const lo = Number(r[1]);
  const hi = Number(r[2]);
  if (!(hi >= lo && hi - lo < ACK_RANGE_MAX)) return null;
  const head = `${p.slice(0, 3).join('-')}-`;
  const tail = `-${p.slice(4).join('-')}`;
  const out = [];
  for (let o = lo; o <= hi; o++) out.push(`${head}${o}${tail}`);
  return out;
}

// ---- decoding ----

const STATUS = ['ACK_STATUS_UNSPECIFIED', 'ACCEPTED', 'INVALID', 'NOT_FOUND', 'STALE',
  'COMMITTED', 'LOST_TO_REBALANCE', 'COMMIT_FAILED'];

class Reader {
  constructor(buf) {
    this.buf = buf;
    this.pos = 0;
    this.lastTopic = undefined;
    this.lastTopicStart = 0;
    this.lastTopicLen = 0;
  }

  varint() {
    const buf = this.buf;
    let b = buf[this.pos++];
    if (b < 128) return b;
    let v = b & 127;
    let mul = 128;
    const start = this.pos - 1;
    for (let i = 1; i < 10; i++) {
      b = buf[this.pos++];
      if (b === undefined) throw new Error('truncated varint');
      if (i >= 7) return this.bigVarint(start); // past 2^49: exact, rare (negatives)
      v += (b & 127) * mul;
      if (b < 128) return v;
      mul *= 128;
    }
    throw new Error('varint longer than 10 bytes');
  }

  // A uint64 varint (an ordering chain): a Number up to 2^49, else an exact BigInt.
  uvarint() {
    const start = this.pos;
    for (let i = 0; i < 7; i++) {
      const b = this.buf[start + i];
      if (b === undefined) throw new Error('truncated varint');
      if (b < 128) return this.varint();
    }
    return BigInt.asUintN(64, this.bigRaw(start));
  }

  // An int64 varint past 49 bits, read exactly (timestamp -1 comes as 10 bytes).
  bigVarint(start) {
    return Number(BigInt.asIntN(64, this.bigRaw(start)));
  }

  bigRaw(start) {
    let r = 0n;
    let shift = 0n;
    let pos = start;
    for (;;) {
      const b = this.buf[pos++];
      if (b === undefined) throw new Error('truncated varint');
      r |= BigInt(b & 127) << shift;
      shift += 7n;
      if (b < 128) break;
    }
    this.pos = pos;
    return r;
  }

  // A topic name: the previous record's string when the bytes are the same (records of
  // one batch mostly share one topic; this saves a string per record).
  topic(start, end) {
    const buf = this.buf;
    const t = this.lastTopic;
    if (t !== undefined && end - start === this.lastTopicLen) {
      const ls = this.lastTopicStart;
      let i = 0;
      const n = end - start;
      while (i < n && buf[start + i] === buf[ls + i]) i++;
      if (i === n) return t;
    }
    this.lastTopic = buf.latin1Slice(start, end);
    this.lastTopicStart = start;
    this.lastTopicLen = end - start;
    return this.lastTopic;
  }

  end(len) {
    const e = this.pos + len;
    if (e > this.buf.length) throw new Error('truncated message');
    return e;
  }

  skip(wire) {
    if (wire === 0) this.varint();
    else if (wire === 2) this.pos = this.end(this.varint());
    else if (wire === 1) this.pos += 8;
    else if (wire === 5) this.pos += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
}

function decodeHeader(r, end) {
  const h = { key: '', value: null };
  let vnull = false;
  let value = null;
  while (r.pos < end) {
    const tag = r.varint();
    const no = tag >>> 3;
    if (no === 1 && (tag & 7) === 2) {
      const e = r.end(r.varint());
      h.key = r.buf.toString('utf8', r.pos, e);
      r.pos = e;
    } else if (no === 2 && (tag & 7) === 2) {
      const e = r.end(r.varint());
      value = r.buf.subarray(r.pos, e);
      r.pos = e;
    } else if (no === 3 && (tag & 7) === 0) vnull = r.varint() !== 0;
    else r.skip(tag & 7);
  }
  h.value = vnull ? null : value || Buffer.alloc(0);
  return h;
}

const EMPTY = Buffer.alloc(0);
const NO_HEADERS = Object.freeze([]);

// Decodes a Decoded (Record.key_decoded, value_decoded) into d: { json, format, schemaId,
// error } (a second occurrence merges, as protobuf's).
function decodeDecoded(r, end, d) {
  const o = d || { json: '', format: '', schemaId: 0, error: '' };
  const buf = r.buf;
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x18) {
      o.schemaId = r.varint() | 0;
    } else if (tag === 0x0a || tag === 0x12 || tag === 0x22) {
      const e = r.end(r.varint());
      const s = buf.toString('utf8', r.pos, e);
      r.pos = e;
      if (tag === 0x0a) o.json = s;
      else if (tag === 0x12) o.format = s;
      else o.error = s;
    } else {
      r.skip(tag & 7);
    }
  }
  return o;
}

// Decodes one Record into make(fields...): the caller's constructor.
function decodeRecord(r, end, make) {
  let topic = '';
  let partition = 0;
  let offset = 0;
  let ts = 0;
  let key = EMPTY;
  let keyNull = false;
  let value = EMPTY;
  let valueNull = false;
  let headers = null;
  let idStart = 0;
  let idEnd = 0;
  let attempt = 0;
  let chain = 0;
  let keyDec = null;
  let valueDec = null;
  const buf = r.buf;
  while (r.pos < end) {
    const tag = buf[r.pos] < 128 ? buf[r.pos++] : r.varint();
    switch (tag) {
      case 0x0a: {
        const e = r.end(r.varint());
        topic = r.topic(r.pos, e);
        r.pos = e;
        break;
      }
      case 0x10:
        partition = r.varint() | 0;
        break;
      case 0x18:
        offset = r.varint();
        break;
      case 0x20:
        ts = r.varint();
        break;
      case 0x2a: {
        const e = r.end(r.varint());
        key = buf.subarray(r.pos, e);
        r.pos = e;
        break;
      }
      case 0x30:
        keyNull = r.varint() !== 0;
        break;
      case 0x3a: {
        const e = r.end(r.varint());
        value = buf.subarray(r.pos, e);
        r.pos = e;
        break;
      }
      case 0x40:
        valueNull = r.varint() !== 0;
        break;
      case 0x4a: {
        const e = r.end(r.varint());
        (headers || (headers = [])).push(decodeHeader(r, e));
        r.pos = e;
        break;
      }
      case 0x52: {
        idEnd = r.end(r.varint());
        idStart = r.pos;
        r.pos = idEnd;
        break;
      }
      case 0x58:
        attempt = r.varint() | 0;
        break;
      case 0x60:
        chain = r.uvarint();
        break;
      case 0x6a: {
        const e = r.end(r.varint());
        keyDec = decodeDecoded(r, e, keyDec);
        r.pos = e;
        break;
      }
      case 0x72: {
        const e = r.end(r.varint());
        valueDec = decodeDecoded(r, e, valueDec);
        r.pos = e;
        break;
      }
      default:
        r.skip(tag & 7);
    }
  }
  return make(topic, partition, offset, ts, keyNull ? null : key, valueNull ? null : value,
    headers || NO_HEADERS, idStart, idEnd, attempt, chain, keyDec, valueDec);
}

function decodePartitions(r, end) {
  const out = [];
  while (r.pos < end) {
    const tag = r.varint();
    if (tag !== 0x0a) {
      r.skip(tag & 7);
      continue;
    }
    const e = r.end(r.varint());
    const tp = { topic: '', partition: 0 };
    while (r.pos < e) {
      const t = r.varint();
      if (t === 0x0a) {
        const se = r.end(r.varint());
        tp.topic = r.buf.toString('utf8', r.pos, se);
        r.pos = se;
      } else if (t === 0x10) tp.partition = r.varint() | 0;
      else r.skip(t & 7);
    }
    out.push(tp);
  }
  return out;
}

/** A SubscribeResponse's AckResults, kept as offsets into the received bytes. */
class AckResultList {
  constructor(buf) {
    this.buf = buf;
    this.length = 0;
    this.statuses = [];
    this.ids = []; // start, end of each id
    this.messages = null; // set only when some result has one
    this.committed = null; // committed_offset of each, set only when some result has one
    this.accepted = 0; // answered by position: how many records were accepted (no result here)
  }

  /** How many records these results answer: a range id's result (from a ksidecar older
   * than ranges, which answers a range by its own id) counts each of its offsets. */
  records() {
    let n = this.length;
    const b = this.buf;
    for (let i = 0; i < this.length; i++) {
      // A '~' within the id only: searching past its end reads the rest of the answer for
      // each id, quadratic on a large refusal.
      let k = this.ids[2 * i];
      const z = this.ids[2 * i + 1];
      while (k < z && b[k] !== 0x7e) k++;
      if (k === z) continue;
      const r = rangeIds(this.id(i));
      if (r) n += r.length - 1;
    }
    return n;
  }

  committedOffset(i) {
    return (this.committed && this.committed[i]) || 0;
  }

  id(i) {
    return this.buf.latin1Slice(this.ids[2 * i], this.ids[2 * i + 1]);
  }

  message(i) {
    return (this.messages && this.messages[i]) || '';
  }

  // Its id i equals the received record m's (compared as bytes).
  idIs(i, m) {
    const s = this.ids[2 * i];
    const n = this.ids[2 * i + 1] - s;
    if (n !== m._idEnd - m._idStart) return false;
    return this.buf.compare(m._buf, m._idStart, m._idEnd, s, s + n) === 0;
  }

  /** As plain objects: [{ackId, status, message}]. */
  toArray() {
    return this.statuses.map((st, i) => ({ ackId: this.id(i), status: st, message: this.message(i) }));
  }
}

function decodeAckResults(r, end) {
  const out = new AckResultList(r.buf);
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x10) {
      out.accepted = r.varint();
      continue;
    }
    if (tag !== 0x0a) {
      r.skip(tag & 7);
      continue;
    }
    const e = r.end(r.varint());
    let idStart = 0;
    let idEnd = 0;
    let status = 0;
    let message = '';
    let committed = 0;
    while (r.pos < e) {
      const t = r.varint();
      if (t === 0x0a) {
        idEnd = r.end(r.varint());
        idStart = r.pos;
        r.pos = idEnd;
      } else if (t === 0x10) status = r.varint();
      else if (t === 0x1a) {
        const se = r.end(r.varint());
        message = r.buf.toString('utf8', r.pos, se);
        r.pos = se;
      } else if (t === 0x20) committed = r.varint();
      else r.skip(t & 7);
    }
    if (message) (out.messages || (out.messages = []))[out.length] = message;
    if (committed) (out.committed || (out.committed = []))[out.length] = committed;
    out.statuses.push(STATUS[status] || `ACK_STATUS_${status}`);
    out.ids.push(idStart, idEnd);
    out.length++;
  }
  return out;
}

/**
 * Decodes a SubscribeResponse. Returns {batch: [made records]} | {assignment: [tp]} |
 * {revocation: [tp]} | {ackResults: AckResultList} | {} (unknown kind).
 * make(topic, partition, offset, timestampMs, key, value, headers, idStart, idEnd, attempt, chain)
 * builds each record; key/value are null for Kafka nulls, else views into buf; the ack
 * id is buf's bytes idStart..idEnd (ASCII); chain is the record's ordering_chain (0: none),
 * a Number below 2^49, else a BigInt.
 * Throws on malformed input.
 */
function decodeResponse(buf, make) {
  const r = new Reader(buf);
  const out = {};
  while (r.pos < buf.length) {
    const tag = r.varint();
    if ((tag & 7) !== 2) {
      r.skip(tag & 7);
      continue;
    }
    const end = r.end(r.varint());
    switch (tag >>> 3) {
      case 1: {
        const recs = [];
        while (r.pos < end) {
          const t = r.varint();
          if (t !== 0x0a) {
            r.skip(t & 7);
            continue;
          }
          const len = r.varint();
          const e = r.end(len);
          recs.push(decodeRecord(r, e, make));
          r.pos = e;
        }
        out.batch = recs;
        break;
      }
      case 2:
        out.assignment = decodePartitions(r, end);
        break;
      case 3:
        out.revocation = decodePartitions(r, end);
        break;
      case 4:
        out.ackResults = decodeAckResults(r, end);
        break;
      default:
        r.pos = end;
    }
    r.pos = end;
  }
  return out;
}

module.exports = {
  ACK_RANGE_MAX,
  encodeAckRanges,
  rangeIds,
  encodeOpen,
  encodeCreditsRequest,
  encodeAck,
  encodeAckCommit,
  encodeNack,
  encodeExtend,
  decodeResponse,
  STATUS,
};
