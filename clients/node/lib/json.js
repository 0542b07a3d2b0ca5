// JSON with integers beyond Number.MAX_SAFE_INTEGER kept exact, as BigInt: Avro longs and
// JSON Schema integers decoded by ksidecar reach 2^63, which JSON.parse would round.
// JSON.parse stays the path for text with no run of 16 digits (every integer it holds
// exactly has fewer, so ordinary records cost one regex test); others take parseExact.
'use strict';

const LONG_RUN = /\d{16}/;
const WS = /[ \t\n\r]*/y;
const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** text parsed; integers Number.isSafeInteger would refuse are BigInt (bigint false:
 * JSON.parse alone, as numbers). */
function parse(text, bigint = true) {
  return bigint && LONG_RUN.test(text) ? parseExact(text) : JSON.parse(text);
}

function parseExact(text) {
  let i = 0;
  const fail = () => {
    throw new SyntaxError(`bad JSON at position ${i}`);
  };
  const ws = () => {
    WS.lastIndex = i;
    WS.test(text);
    i = WS.lastIndex;
  };
  const str = () => {
    let j = i + 1;
    for (; j < text.length && text[j] !== '"'; j++) if (text[j] === '\\') j++;
    if (j >= text.length) fail();
    const s = JSON.parse(text.slice(i, j + 1)); // the escapes as JSON.parse has them
    i = j + 1;
    return s;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '"') return str();
    if (c === '{') {
      const o = {};
      i++;
      ws();
      if (text[i] === '}') return i++, o;
      for (;;) {
        ws();
        if (text[i] !== '"') fail();
        const k = str();
        ws();
        if (text[i++] !== ':') fail();
        const v = value();
        // an own "__proto__" key, as JSON.parse makes it
        if (k === '__proto__') Object.defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
        else o[k] = v;
        ws();
        if (text[i] === ',') i++;
        else if (text[i++] === '}') return o;
        else fail();
      }
    }
    if (c === '[') {
      const a = [];
      i++;
      ws();
      if (text[i] === ']') return i++, a;
      for (;;) {
        a.push(value());
        ws();
        if (text[i] === ',') i++;
        else if (text[i++] === ']') return a;
        else fail();
      }
    }
    for (const [w, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(w, i)) return (i += w.length), v;
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail();
    i = NUMBER.lastIndex;
    const n = Number(m[0]);
    return m[1] || m[2] || Number.isSafeInteger(n) ? n : BigInt(m[0]);
  };
  const v = value();
  ws();
  if (i !== text.length) fail();
  return v;
}

/** JSON.stringify(value), with each BigInt written as its digits (JSON.stringify refuses them). */
function stringify(value) {
  try {
    return JSON.stringify(value);
  } catch (e) {
    if (!(e instanceof TypeError) || !/BigInt/.test(e.message)) throw e;
  }
  // Each BigInt becomes a string "<mark><digits>", the mark one that no string of the value
  // holds, then the digits replace it with its quotes.
  const plain = JSON.stringify(value, (k, v) => (typeof v === 'bigint' ? 0 : v));
  let mark = 'ksbig';
  while (plain.includes(mark)) mark += Math.random().toString(36).slice(2);
  const text = JSON.stringify(value, (k, v) => (typeof v === 'bigint' ? mark + v : v));
  return text.split(`"${mark}`).map((s, n) => (n ? s.replace('"', '') : s)).join('');
}

module.exports = { parse, stringify };
