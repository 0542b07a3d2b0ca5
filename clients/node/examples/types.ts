// Every name index.d.ts exports, used as an application would; type-checked, never run:
//   npm run typecheck   (tsc --noEmit -p tsconfig.json; tests/clients/node.sh runs it)
import * as ksidecar from '..';
import {
  AckOptions, AckStatus, CommitResult, CommitStatus, ConnectionOptions, Decoded, Header, JsonOptions, KsidecarAuthError,
  KsidecarClosedError, KsidecarConfigError, KsidecarDecodeError, KsidecarConnectError, KsidecarError, KsidecarPermissionError,
  KsidecarProduceError, KsidecarRequestError, KsidecarTimeoutError, Message, PublishOptions,
  Publisher, PublisherOptions, Subscriber, SubscriberOptions, SubscriberStats, TlsOptions,
  TopicPartition, parseJson, protoDir, services, stringifyJson,
} from '..';

// One row per value index.d.ts exports: a name added to index.d.ts without a row here, or a
// row whose name index.d.ts no longer exports, fails to compile.
const exported: { [K in keyof typeof ksidecar]: unknown } = {
  Subscriber, Message, Publisher, protoDir, services, KsidecarError, KsidecarConfigError,
  KsidecarConnectError, KsidecarAuthError, KsidecarPermissionError, KsidecarRequestError,
  KsidecarTimeoutError, KsidecarClosedError, KsidecarProduceError, KsidecarDecodeError, parseJson, stringifyJson,
};

// A key decoded with its schema, integers as JSON.parse has them; a long id kept exact.
function decodedKey(m: Message): unknown {
  const o: JsonOptions = { bigint: false };
  return m.keyJson(o);
}
const longId: unknown = parseJson('{"id":9007199254740993}');
const longText: string | undefined = stringifyJson({ id: 2n ** 63n - 1n });

// A value decoded with its schema: parsed JSON, or why it was not decoded.
function decodedValue(m: Message): unknown {
  const d: Decoded | null = m.valueDecoded;
  try {
    return m.valueJson();
  } catch (e) {
    return e instanceof KsidecarDecodeError ? `undecoded (schema ${d ? d.schemaId : 0}): ${e.message}` : null;
  }
}

function describe(err: KsidecarError): string {
  if (err instanceof KsidecarAuthError) return `check the token (${err.code})`;
  if (err instanceof KsidecarPermissionError) return 'not allowed';
  if (err instanceof KsidecarConnectError || err instanceof KsidecarTimeoutError) return 'retry later';
  if (err instanceof KsidecarConfigError || err instanceof KsidecarRequestError) return 'fix the call';
  if (err instanceof KsidecarClosedError) return 'closed';
  if (err instanceof KsidecarProduceError) return `produce failed: ${err.message}`;
  return err.message;
}

async function consume(target: string): Promise<SubscriberStats> {
  const tls: TlsOptions = { rootCerts: 'ca.pem', certChain: 'client.pem', privateKey: 'client.key' };
  const conn: ConnectionOptions = { token: 's3cret', tls };
  const opts: SubscriberOptions = { ...conn, group: 'orders-group', topics: ['orders'], maxMessages: 500,
    ackRanges: true };
  const sub = new Subscriber(target, opts);
  sub.on('assignment', (parts: TopicPartition[]) => console.log(parts.map((p) => `${p.topic}[${p.partition}]`)));
  sub.on('error', (err) => console.error(describe(err)));
  sub.on('message', (msg: Message) => {
    const headers: readonly Header[] = msg.headers;
    console.log(msg.topic, msg.partition, msg.offset, msg.key?.toString(), headers.length);
    msg.ack();
  });
  sub.start();
  for await (const msg of sub) {
    const status: AckStatus = await msg.nackWithResult(1000, 'later');
    console.log(status, sub.stats.outstandingMessages);
    const wait: AckOptions = { waitCommit: true };
    const done: CommitResult = await msg.ackWithResult(wait);
    const how: CommitStatus = done.status;
    console.log(how, done.committedOffset, done.message);
    break;
  }
  return sub.close(5000);
}

async function produce(target: string): Promise<number> {
  const popts: PublisherOptions = { token: 's3cret', flushMs: 2, maxBatch: 100 };
  const pub = new Publisher(target, popts);
  const o: PublishOptions = { key: 'user-1', headers: [{ key: 'h', value: 'v' }], partition: 0 };
  const r = await pub.publish('orders', JSON.stringify({ n: 1 }), o);
  await pub.close();
  return r.offset;
}

function unary(target: string): void {
  const svc = services();
  console.log(protoDir(), typeof svc.Consumer, target, Object.keys(exported).length);
}

void consume;
void produce;
void unary;
void decodedValue;
void decodedKey;
void longId;
void longText;
