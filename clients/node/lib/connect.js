// Channel credentials, bearer-token metadata and the .proto files, shared by Subscriber and Publisher.
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { KsidecarConfigError } = require('./errors');

const PROTO_FILES = ['ksidecar/v1/consumer.proto', 'ksidecar/v1/producer.proto'];

/**
 * Where the .proto files are: $KSIDECAR_PROTO_DIR, else the package's own proto/ (copied
 * there by `npm install`/`npm pack`, see scripts/copy-proto.js), else the repository's.
 */
function protoDir() {
  const dirs = [
    process.env.KSIDECAR_PROTO_DIR,
    path.join(__dirname, '..', 'proto'),
    path.join(__dirname, '..', '..', '..', 'proto'),
  ].filter(Boolean);
  for (const d of dirs) if (fs.existsSync(path.join(d, PROTO_FILES[0]))) return d;
  throw new KsidecarConfigError(
    `ksidecar .proto files not found in ${dirs.join(', ')}: set KSIDECAR_PROTO_DIR or ` +
      'reinstall the package (its prepare step copies proto/)');
}

let pkg = null;
/** The loaded ksidecar.v1 package (grpc-js service constructors), loaded once. */
function services() {
  if (!pkg) {
    const def = protoLoader.loadSync(PROTO_FILES, {
      includeDirs: [protoDir()],
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
    });
    pkg = grpc.loadPackageDefinition(def).ksidecar.v1;
  }
  return pkg;
}

const readMaybe = (v, what) => {
  if (v == null) return null;
  if (Buffer.isBuffer(v)) return v;
  if (typeof v === 'string') {
    if (v.includes('-----BEGIN')) return Buffer.from(v);
    try {
      return fs.readFileSync(v);
    } catch (e) {
      throw new KsidecarConfigError(`tls.${what}: cannot read ${v}: ${e.message}`);
    }
  }
  throw new KsidecarConfigError(`tls.${what} must be a Buffer, PEM text or a file path`);
};

/**
 * Channel credentials from options: credentials (grpc-js ChannelCredentials) as given;
 * tls: true or {rootCerts, certChain, privateKey} (Buffers, PEM text or file paths; both
 * of certChain/privateKey for mTLS); neither: plaintext.
 */
function channelCredentials(opts) {
  if (opts.credentials) return opts.credentials;
  if (!opts.tls) return grpc.credentials.createInsecure();
  const t = opts.tls === true ? {} : opts.tls;
  const cert = readMaybe(t.certChain, 'certChain');
  const key = readMaybe(t.privateKey, 'privateKey');
  if (!cert !== !key)
    throw new KsidecarConfigError('tls: give both certChain and privateKey (mTLS), or neither');
  return grpc.credentials.createSsl(readMaybe(t.rootCerts, 'rootCerts'), key, cert);
}

/** Metadata for each call: `authorization: Bearer <token>` when a token is set. */
function callMetadata(opts) {
  const md = new grpc.Metadata();
  if (opts.token != null) {
    if (typeof opts.token !== 'string' || !opts.token || /[\r\n]/.test(opts.token))
      throw new KsidecarConfigError('token must be a non-empty string on one line');
    md.set('authorization', `Bearer ${opts.token}`);
  }
  return md;
}

/** grpc-js channel options: the user's, plus the TLS name override when asked. */
function channelOptions(opts) {
  const o = { ...(opts.channelOptions || {}) };
  if (opts.tls && opts.tls.serverName) o['grpc.ssl_target_name_override'] = opts.tls.serverName;
  return o;
}

function checkTarget(target) {
  if (typeof target !== 'string' || !target)
    throw new KsidecarConfigError('target must be "host:port" of ksidecar\'s grpc.listen');
}

module.exports = { protoDir, services, channelCredentials, callMetadata, channelOptions, checkTarget };
