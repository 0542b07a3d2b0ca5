// Compiled (tsc --noEmit --strict) by test/types.test.js: index.d.ts covers the README's use.
import { Subscriber, Publisher, Message, AckStatus, CommitResult, CommitStatus, KsidecarAuthError } from '../..';

async function main(): Promise<void> {
  const sub = new Subscriber('127.0.0.1:50051', { group: 'g', topics: ['t'], maxMessages: 500, token: 'x' });
  for await (const msg of sub) {
    const v: Buffer | null = msg.value;
    const st: AckStatus = await msg.ackWithResult();
    const cr: CommitResult = await msg.ackWithResult({ waitCommit: true });
    const cs: CommitStatus = cr.status;
    console.log(cs, cr.committedOffset, cr.message);
    msg.nack(1000, 'later');
    void v;
    void st;
    break;
  }
  sub.on('message', (m: Message) => m.ack());
  sub.on('error', (e) => {
    if (e instanceof KsidecarAuthError) console.log(e.code);
  });
  await sub.close(5000);
  const pub = new Publisher('127.0.0.1:50051', { tls: { rootCerts: 'ca.pem' } });
  const r = await pub.publish('t', 'v', { key: 'k', headers: { a: 'b' } });
  console.log(r.partition, r.offset);
  await pub.close();
}
void main;
