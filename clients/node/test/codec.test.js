// The hand-written Subscribe codec against protobufjs loaded from the repository's .proto files.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const protobuf = require('protobufjs');
const codec = require('../lib/codec');
const { protoDir } = require('../lib/connect');

const root = protobuf.loadSync(path.join(protoDir(), 'ksidecar/v1/consumer.proto'));
const Req = root.lookupType('ksidecar.v1.SubscribeRequest');
const Resp = root.lookupType('ksidecar.v1.SubscribeResponse');
const plain = (T, buf) => T.toObject(T.decode(buf), { longs: Number, defaults: false, bytes: Buffer });

test('requests decode with protobufjs to what was encoded', () => {
  assert.deepStrictEqual(plain(Req, codec.encodeOpen({
    group: 'g', topics: ['a', 'b.c'], records: 7, bytes: 5000000000, deadlineMs: 2000, subscriber: 'me',
    orderedBatches: true,
  })), { open: { group: 'g', topics: ['a', 'b.c'], credits: { records: 7, bytes: 5000000000 }, deadlineMs: 2000,
    subscriber: 'me', orderedBatches: true } });
  assert.deepStrictEqual(plain(Req, codec.encodeOpen({ group: 'g', topics: ['a'] })).open.orderedBatches, undefined);
  const fo = plain(Req, codec.encodeOpen({ group: 'g', topics: ['a'], valueFormat: 'avro', keyFormat: 'auto' })).open;
  assert.deepStrictEqual([fo.valueFormat, fo.keyFormat], ['avro', 'auto']);
  const ids = Array.from({ length: 300 }, (_, i) => `a1676cdfec43ce1e18-3-2-${i}-1-demo`);
  assert.deepStrictEqual(plain(Req, codec.encodeAck(ids)), { ack: { ackIds: ids } });
  const raw = Buffer.from(`xx${ids.join('')}`); // ids given as received bytes
  let at = 2;
  const recs = ids.map((id) => ({ _buf: raw, _idStart: at, _idEnd: (at += id.length) }));
  assert.deepStrictEqual(plain(Req, codec.encodeAck(recs)), { ack: { ackIds: ids } });
  assert.deepStrictEqual(plain(Req, codec.encodeNack(['x', 'y'], 3000, 'retry é')),
    { nack: { ackIds: ['x', 'y'], delayMs: 3000, reason: 'retry é' } });
  assert.deepStrictEqual(plain(Req, codec.encodeNack(['x'], 0, 'poison', true)),
    { nack: { ackIds: ['x'], reason: 'poison', deadLetter: true } });
  assert.deepStrictEqual(plain(Req, codec.encodeExtend(['x'], 600000)),
    { modifyDeadline: { ackIds: ['x'], deadlineMs: 600000 } });
  assert.deepStrictEqual(plain(Req, codec.encodeCreditsRequest(3, 0)), { credits: { records: 3 } });
});

test('responses encoded by protobufjs decode to the same fields', () => {
  const recs = [
    { topic: 't', partition: 3, offset: 2 ** 40 + 5, timestampMs: -1, key: Buffer.from('k'), value: Buffer.from('v'),
      headers: [{ key: 'h', value: Buffer.from('hv') }, { key: 'n', valueNull: true }], ackId: 'id-1', attempt: 2,
      orderingChain: 1 },
    { topic: 't', partition: 0, offset: 0, timestampMs: 1796001086491, keyNull: true, valueNull: true, ackId: 'id-2', attempt: 1 },
    { topic: 't', partition: 0, offset: 1, ackId: 'id-3', attempt: 1, orderingChain: '9223372036854775808' },
    { topic: 't', partition: 0, offset: 2, ackId: 'id-4', attempt: 1, orderingChain: '18446744073709551615' },
    { topic: 't', partition: 0, offset: 3, ackId: 'id-5', attempt: 1, orderingChain: 2 ** 49 - 1 },
  ];
  const buf = Resp.encode(Resp.fromObject({ batch: { records: recs } })).finish();
  const b = Buffer.from(buf);
  const got = codec.decodeResponse(b, (topic, partition, offset, ts, key, value, headers, s, e, attempt, chain) =>
    ({ topic, partition, offset, ts, key, value, headers, ackId: b.latin1Slice(s, e), attempt, chain }));
  const E = Buffer.alloc(0);
  const dec = Buffer.from(Resp.encode(Resp.fromObject({ batch: { records: [
    { topic: 't', ackId: 'id-6', valueDecoded: { json: '{"a":[1,"é"]}', format: 'avro', schemaId: 7 },
      keyDecoded: { schemaId: 9, decodeError: 'unknown schema id 9' } }] } })).finish());
  const [d] = codec.decodeResponse(dec, (...f) => ({ kd: f[11], vd: f[12] })).batch;
  assert.deepStrictEqual(d, { kd: { json: '', format: '', schemaId: 9, error: 'unknown schema id 9' },
    vd: { json: '{"a":[1,"é"]}', format: 'avro', schemaId: 7, error: '' } });
  assert.deepStrictEqual(got.batch, [
    { topic: 't', partition: 3, offset: 2 ** 40 + 5, ts: -1, key: Buffer.from('k'), value: Buffer.from('v'),
      headers: [{ key: 'h', value: Buffer.from('hv') }, { key: 'n', value: null }], ackId: 'id-1', attempt: 2, chain: 1 },
    { topic: 't', partition: 0, offset: 0, ts: 1796001086491, key: null, value: null, headers: [], ackId: 'id-2', attempt: 1,
      chain: 0 },
    { topic: 't', partition: 0, offset: 1, ts: 0, key: E, value: E, headers: [], ackId: 'id-3', attempt: 1, chain: 2n ** 63n },
    { topic: 't', partition: 0, offset: 2, ts: 0, key: E, value: E, headers: [], ackId: 'id-4', attempt: 1,
      chain: 2n ** 64n - 1n },
    { topic: 't', partition: 0, offset: 3, ts: 0, key: E, value: E, headers: [], ackId: 'id-5', attempt: 1, chain: 2 ** 49 - 1 },
  ]);
  const ar = Resp.encode(Resp.fromObject({ ackResults: { results: [
    { ackId: 'a', status: 1 }, { ackId: 'b', status: 4, message: 'revoked' }, { ackId: 'c', status: 3 }] } })).finish();
  assert.deepStrictEqual(codec.decodeResponse(Buffer.from(ar), null).ackResults.toArray(), [
    { ackId: 'a', status: 'ACCEPTED', message: '' }, { ackId: 'b', status: 'STALE', message: 'revoked' },
    { ackId: 'c', status: 'NOT_FOUND', message: '' }]);
  const as = Resp.encode(Resp.fromObject({ assignment: { partitions: [{ topic: 't', partition: 1 }] } })).finish();
  assert.deepStrictEqual(codec.decodeResponse(Buffer.from(as), null).assignment, [{ topic: 't', partition: 1 }]);
  assert.throws(() => codec.decodeResponse(Buffer.from(buf).subarray(0, buf.length - 3), () => ({})), /truncated/);
});
