// TypeScript declarations of the ksidecar Node client (index.js).
import { EventEmitter } from 'events';
import type { ChannelCredentials, ChannelOptions } from '@grpc/grpc-js';

export type AckStatus = 'ACCEPTED' | 'STALE' | 'INVALID' | 'NOT_FOUND';

/** Only for acks that wait for their commit (ackWithResult({waitCommit: true})). */
export type CommitStatus = AckStatus | 'COMMITTED' | 'LOST_TO_REBALANCE' | 'COMMIT_FAILED';

export interface CommitResult {
  status: CommitStatus;
  /** The partition's commit point the broker confirmed (the next offset it delivers from), -1 none; 0 when unknown. */
  committedOffset: number;
  message: string;
}

export interface AckOptions {
  /** Resolve once a commit the broker confirmed covers the record (or why not). */
  waitCommit: true;
}

export interface TlsOptions {
  /** CA certificates to trust (Buffer, PEM text or a file path); the system's when left out. */
  rootCerts?: Buffer | string;
  /** Client certificate chain and key, for mTLS (give both). */
  certChain?: Buffer | string;
  privateKey?: Buffer | string;
  /** The name to check the server certificate against, when it differs from the target's host. */
  serverName?: string;
}

export interface ConnectionOptions {
  /** Sent as `authorization: Bearer <token>` on every call. */
  token?: string;
  /** true (system roots) or TlsOptions; plaintext when left out. */
  tls?: boolean | TlsOptions;
  /** grpc-js channel credentials, used as given (instead of tls). */
  credentials?: ChannelCredentials;
  /** Extra grpc-js channel options. */
  channelOptions?: ChannelOptions;
}

export interface SubscriberOptions extends ConnectionOptions {
  group: string;
  topics: string[];
  /** Optional subscriber name, shown in ksidecar's group status. */
  subscriber?: string;
  /** Most messages delivered and not yet acked or nacked (the stream's record credits). Default 4000. */
  maxMessages?: number;
  /** Most key+value bytes delivered and not yet settled (byte credits). Default 10 MiB. */
  maxBytes?: number;
  /** The lease deadline asked for each message, and each extension's length. Default 30000. */
  ackDeadlineMs?: number;
  /** Longest time a message's lease is extended while it is unsettled. Default 3600000. */
  maxExtensionMs?: number;
  /** Acks and nacks are sent at most this long after the first one queued. Default 5. */
  flushMs?: number;
  /** ...or as soon as this many are queued. Default 1000. */
  flushIds?: number;
  /**
   * Plain acks (not those that wait for their commit) go as ack ranges answered by position:
   * a partition's consecutive offsets as one id, answered by a count and a result for each
   * refused record only. false sends every id on its own, each answered by its id (a
   * ksidecar older than ack ranges refuses them INVALID). Default true.
   */
  ackRanges?: boolean;
  /**
   * "avro", "avro_plain", "json_schema", "protobuf" or "auto": values in the schema wire format are
   * decoded with the schema registry (msg.valueJson()); "binary": none; "" (default): the
   * group's group.value_format.
   */
  valueFormat?: string;
  /** The same for keys (msg.keyJson()). */
  keyFormat?: string;
  /** close()'s wait for the ack results. Default 30000. */
  closeTimeoutMs?: number;
  /** Give up (a KsidecarConnectError) when the first stream cannot be opened within this. Default 10000. */
  connectTimeoutMs?: number;
  /** Give up when a broken stream cannot be reopened within this. Default Infinity. */
  reconnectTimeoutMs?: number;
  /** Reconnect backoff: initial delay, cap and multiplier, with jitter (half of each delay random). */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  backoffMultiplier?: number;
  /** Where warnings go when nobody listens to 'warning'. Default console. */
  logger?: { warn(msg: string): void };
}

export interface Header {
  key: string;
  value: Buffer | null;
}

export interface TopicPartition {
  topic: string;
  partition: number;
}

export interface JsonOptions {
  /** Integers beyond Number.MAX_SAFE_INTEGER as BigInt (default true); false: JSON.parse's numbers. */
  bigint?: boolean;
}

/** JSON text parsed, with integers beyond Number.MAX_SAFE_INTEGER as BigInt unless bigint is
 * false (JSON.parse when no run of 16 digits is in text). */
export function parseJson(text: string, bigint?: boolean): unknown;
/** JSON.stringify(value) with each BigInt written as its digits. */
export function stringifyJson(value: unknown): string | undefined;

/** A key or value in the schema wire format decoded with the schema registry's schema. */
export interface Decoded {
  /** The JSON text; "" when it could not be decoded. */
  json: string;
  /** "avro", "json_schema" or "protobuf". */
  format: string;
  schemaId: number;
  /** Why it could not be decoded (unknown schema id, corrupt bytes); "" when it was. */
  error: string;
}

export class Message {
  /** Set when the key or value is shown in a schema format; key and value keep the bytes. */
  readonly keyDecoded: Decoded | null;
  readonly valueDecoded: Decoded | null;
  /** The decoded value parsed; undefined when not shown in a schema format; throws
   * KsidecarDecodeError when ksidecar could not decode it. Integers beyond
   * Number.MAX_SAFE_INTEGER (Avro longs) are BigInt, exact; with { bigint: false }, numbers
   * as JSON.parse rounds them. */
  valueJson(options?: JsonOptions): unknown;
  keyJson(options?: JsonOptions): unknown;
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  /** -1 when unknown. */
  readonly timestampMs: number;
  /** null for a Kafka null key; otherwise a view of the received bytes. */
  readonly key: Buffer | null;
  readonly value: Buffer | null;
  readonly headers: readonly Header[];
  readonly ackId: string;
  /** 1 on first delivery. */
  readonly attempt: number;
  readonly size: number;
  readonly receivedAt: number;
  ack(): void;
  nack(delayMs?: number, reason?: string): void;
  ackWithResult(): Promise<AckStatus>;
  ackWithResult(opts: AckOptions): Promise<CommitResult>;
  nackWithResult(delayMs?: number, reason?: string): Promise<AckStatus>;
  /** Rejects it as poison: to the group's dead-letter topic at once, with reason in ksidecar.last_error. */
  deadLetter(reason?: string): void;
  deadLetterWithResult(reason?: string): Promise<AckStatus>;
}

export interface SubscriberStats {
  delivered: number;
  outstandingMessages: number;
  outstandingBytes: number;
  maxOutstandingMessages: number;
  maxOutstandingBytes: number;
  acksSent: number;
  nacksSent: number;
  extensionsSent: number;
  writes: number;
  staleLocal: number;
  reconnects: number;
  /** Records of an ordering chain dropped unhandled: copies ksidecar took back (after a nack, an expired lease or a lost stream) and sends again. */
  dropped: number;
}

export class Subscriber extends EventEmitter implements AsyncIterable<Message> {
  constructor(target: string, options: SubscriberOptions);
  readonly target: string;
  readonly stats: SubscriberStats;
  start(): void;
  flush(): void;
  setFlowControl(limits: { maxMessages?: number; maxBytes?: number }): void;
  /** Flushes the acks and nacks, waits for their results (rejects with KsidecarTimeoutError), ends the stream. */
  close(timeoutMs?: number): Promise<SubscriberStats>;
  [Symbol.asyncIterator](): AsyncIterator<Message>;
  on(event: 'message', listener: (msg: Message) => void): this;
  on(event: 'error', listener: (err: KsidecarError) => void): this;
  on(event: 'warning', listener: (msg: string) => void): this;
  on(event: 'assignment' | 'revocation', listener: (partitions: TopicPartition[]) => void): this;
  on(event: 'connected', listener: (info: { generation: number }) => void): this;
  on(event: 'reconnecting', listener: (info: { reason: string }) => void): this;
  on(event: 'close', listener: () => void): this;
}

export interface PublisherOptions extends ConnectionOptions {
  /** A batch goes out this long after its first record. Default 1. */
  flushMs?: number;
  /** ...or when it holds this many records. Default 500. */
  maxBatch?: number;
  /** Each Produce call's deadline. Default 30000. */
  timeoutMs?: number;
}

export interface PublishOptions {
  key?: string | Buffer | Uint8Array | null;
  headers?: Record<string, string | Buffer> | { key: string; value: string | Buffer | null }[];
  /** By key when left out. */
  partition?: number;
  /** A schema of the schema registry: the value is then any JSON-serializable value
   * (JSON.stringify; a BigInt is written with its exact digits), written by ksidecar in Confluent's wire format (Avro or JSON Schema). */
  valueSchemaId?: number;
  /** Or the subject's version valueSchemaVersion (a number or "latest", the default). */
  valueSubject?: string;
  valueSchemaVersion?: string | number;
}

export class Publisher {
  constructor(target: string, options?: PublisherOptions);
  readonly target: string;
  publish(topic: string, value: unknown, options?: PublishOptions):
    Promise<{ topic: string; partition: number; offset: number }>;
  flush(): Promise<void>;
  close(): Promise<void>;
}

export class KsidecarError extends Error {
  /** The gRPC status name when a call failed (e.g. 'UNAUTHENTICATED'), else null. */
  readonly code: string | null;
}
export class KsidecarConfigError extends KsidecarError {}
export class KsidecarConnectError extends KsidecarError {}
export class KsidecarAuthError extends KsidecarError {}
export class KsidecarPermissionError extends KsidecarError {}
export class KsidecarRequestError extends KsidecarError {}
export class KsidecarTimeoutError extends KsidecarError {}
export class KsidecarClosedError extends KsidecarError {}
export class KsidecarProduceError extends KsidecarError {}
export class KsidecarDecodeError extends KsidecarError {}

/** The directory the .proto files are loaded from. */
export function protoDir(): string;
/** The ksidecar.v1 grpc-js service constructors (Consumer, Producer), for the unary calls. */
export function services(): any;
