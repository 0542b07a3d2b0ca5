// lib/json.js: integers beyond Number.MAX_SAFE_INTEGER kept exact both ways, everything else as
// JSON.parse and JSON.stringify have it.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { parseJson, stringifyJson, Message, KsidecarDecodeError } = require('..');

const BIG = [2n ** 53n + 1n, -(2n ** 63n), 2n ** 64n - 1n, 2n ** 63n - 1n, -(2n ** 53n) - 1n];

test('integers JSON.parse would round are BigInt with their exact digits', () => {
  for (const b of BIG) {
    assert.strictEqual(parseJson(`${b}`), b);
    assert.strictEqual(parseJson(`{"id":${b}}`).id, b);
  }
  const text = `{"id":${2n ** 53n + 1n},"a":[1,${-(2n ** 63n)},{"u":${2n ** 64n - 1n},"n":null}],"t":true,"f":false}`;
  assert.deepStrictEqual(parseJson(text), {
    id: 2n ** 53n + 1n, a: [1, -(2n ** 63n), { u: 2n ** 64n - 1n, n: null }], t: true, f: false,
  });
  // bigint false: JSON.parse's rounded numbers
  assert.strictEqual(parseJson(`${2n ** 53n + 1n}`, false), 2 ** 53);
});

test('safe integers stay numbers, floats and strings as JSON.parse has them', () => {
  const texts = [
    '9007199254740991', '-9007199254740991', '[1234567890123456, 0, -0, 42]',
    '{"x":1.2345678901234567,"y":12345678901234567e2,"z":-1.5E-300,"w":0.30000000000000004}',
    '{"s":"12345678901234567890","e":"\\"\\\\q\\u00e9 99999999999999999999\\n","k":"caf\u00e9"}',
    ' { "a" : [ ] , "b" : { } , "c" : [ 99999999999999999 ] } ',
    '{"__proto__":{"n":12345678901234567}}',
  ];
  for (const t of texts) {
    const got = parseJson(t);
    const want = JSON.parse(t);
    if (t.includes('99999999999999999 ]')) {
      assert.strictEqual(got.c[0], 99999999999999999n);
      continue;
    }
    if (t.includes('__proto__')) {
      assert.ok(Object.prototype.hasOwnProperty.call(got, '__proto__'));
      assert.strictEqual(got.__proto__.n, 12345678901234567n); // eslint-disable-line no-proto
      continue;
    }
    assert.deepStrictEqual(got, want, t);
  }
  assert.strictEqual(typeof parseJson('9007199254740991'), 'number');
  assert.ok(Object.is(parseJson('[-0, 1234567890123456]')[0], -0));
  assert.strictEqual(parseJson('{"s":"12345678901234567890"}').s, '12345678901234567890');
});

test('malformed text is refused as JSON.parse refuses it', () => {
  for (const t of ['[12345678901234567,]', '{"a":12345678901234567', '12345678901234567 x', '-',
    '[012345678901234567]', '{"a" 12345678901234567}', '"12345678901234567']) {
    assert.throws(() => parseJson(t), SyntaxError, t);
    assert.throws(() => JSON.parse(t), SyntaxError, t);
  }
});

test('stringifyJson writes BigInt with its digits, the rest as JSON.stringify', () => {
  const v = { id: 2n ** 53n + 1n, a: [-(2n ** 63n), 1.5, 'x'], o: { u: 2n ** 64n - 1n }, s: 'ksbig12"', n: null };
  const text = stringifyJson(v);
  assert.strictEqual(text,
    `{"id":9007199254740993,"a":[-9223372036854775808,1.5,"x"],"o":{"u":18446744073709551615},"s":"ksbig12\\"","n":null}`);
  assert.deepStrictEqual(parseJson(text), v);
  for (const b of BIG) assert.strictEqual(stringifyJson(b), `${b}`);
  const plain = { a: [1, 2.5, 'é', null, true], d: new Date(0), u: undefined };
  assert.strictEqual(stringifyJson(plain), JSON.stringify(plain));
  // a string holding the mark keeps it: another mark is taken
  const marked = { s: 'ksbig', t: ['ksbig1', 2n ** 60n] };
  assert.deepStrictEqual(parseJson(stringifyJson(marked)), marked);
  assert.throws(() => stringifyJson({ toJSON() { throw new TypeError('own'); } }), /own/);
});

test('Message.valueJson() and keyJson() keep longs exact; { bigint: false } has numbers', () => {
  const dec = (json) => ({ json, format: 'avro', schemaId: 1, error: '' });
  const m = new Message(null, 't', 0, 0, 0, null, null, [], 0, 0, 1, 0,
    dec(`${2n ** 64n - 1n}`), dec(`{"id":${-(2n ** 63n)},"q":3}`));
  assert.deepStrictEqual(m.valueJson(), { id: -(2n ** 63n), q: 3 });
  assert.deepStrictEqual(m.valueJson({ bigint: false }), { id: -(2 ** 63), q: 3 });
  assert.strictEqual(m.keyJson(), 2n ** 64n - 1n);
  const bad = new Message(null, 't', 0, 0, 0, null, null, [], 0, 0, 1, 0, null,
    { json: '', format: 'avro', schemaId: 9, error: 'unknown schema id 9' });
  assert.throws(() => bad.valueJson(), KsidecarDecodeError);
  assert.strictEqual(bad.keyJson(), undefined);
});
