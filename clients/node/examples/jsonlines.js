// Records as JSON lines, values decoded with the schema registry; and JSON values produced
// with a schema of the registry.
//   node examples/jsonlines.js consume 127.0.0.1:50051 group topic n [value-format]
//   echo '{"id":1}' | node examples/jsonlines.js produce 127.0.0.1:50051 topic id|subject
// consume prints a line a record, {offset, value (the bytes, base64), value_schema_id,
// value_json}, and exits after n; produce writes each line of stdin as one JSON value. Longs
// beyond 2^53 stay exact both ways (BigInt).
'use strict';
const readline = require('node:readline');
const { Subscriber, Publisher, parseJson, stringifyJson } = require('..');

async function consume(target, group, topic, n, valueFormat = 'avro_plain') {
  const sub = new Subscriber(target, { group, topics: [topic], valueFormat });
  const timer = setTimeout(() => { console.error(`fewer than ${n} records within 60 s`); process.exit(1); }, 60000);
  let got = 0;
  for await (const msg of sub) {
    console.log(stringifyJson({ offset: msg.offset, value: msg.value.toString('base64'),
      value_schema_id: msg.valueDecoded && msg.valueDecoded.schemaId, value_json: msg.valueJson() }));
    msg.ack();
    if (++got === n) break;
  }
  clearTimeout(timer);
}

async function produce(target, topic, schema) {
  const pub = new Publisher(target);
  const opts = /^\d+$/.test(schema) ? { valueSchemaId: Number(schema) } : { valueSubject: schema };
  const sent = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    sent.push(pub.publish(topic, parseJson(line), { partition: 0, ...opts }));
  }
  for (const r of await Promise.all(sent)) console.log(`partition ${r.partition} offset ${r.offset}`);
  await pub.close();
}

const [mode, target, ...rest] = process.argv.slice(2);
(mode === 'consume' ? consume(target, rest[0], rest[1], Number(rest[2]), rest[3])
  : produce(target, rest[0], rest[1])).catch((e) => {
  console.error(`${e.name}: ${e.message}`);
  process.exit(1);
});
