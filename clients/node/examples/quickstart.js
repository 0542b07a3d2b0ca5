// The README's example: publish three records, then consume them with the Subscriber and ack each.
//   node examples/quickstart.js 127.0.0.1:50051 demo-group demo
'use strict';
const { Subscriber, Publisher } = require('..');

async function main() {
  const [target = '127.0.0.1:50051', group = 'demo-group', topic = 'demo'] = process.argv.slice(2);

  const pub = new Publisher(target);
  for (const user of ['alice', 'bob', 'carol']) {
    const r = await pub.publish(topic, JSON.stringify({ user, event: 'page_view' }), { key: user });
    console.log(`published ${user} to ${topic}[${r.partition}]@${r.offset}`);
  }
  await pub.close();

  const sub = new Subscriber(target, { group, topics: [topic] });
  let n = 0;
  for await (const msg of sub) {
    console.log(`${msg.topic}[${msg.partition}]@${msg.offset} key=${msg.key} value=${msg.value} attempt=${msg.attempt}`);
    console.log(`  ack: ${await msg.ackWithResult()}`);
    if (++n === 3) break; // leaving the loop closes the subscriber (pending acks are flushed)
  }
}

main().catch((e) => {
  console.error(`${e.name}: ${e.message}`);
  process.exit(1);
});
