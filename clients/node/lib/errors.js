// Typed errors of the ksidecar Node client: each names the problem and what to check.
'use strict';
const grpc = require('@grpc/grpc-js');

/** The base class; code is the gRPC status name when a call failed (e.g. 'UNAUTHENTICATED'). */
class KsidecarError extends Error {
  constructor(message, { code = null, cause = undefined } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = this.constructor.name;
    this.code = code;
  }
}
/** Bad options given to the library (nothing was sent). */
class KsidecarConfigError extends KsidecarError {}
/** ksidecar could not be reached at the target (wrong address, down, TLS mismatch). */
class KsidecarConnectError extends KsidecarError {}
/** ksidecar refused the credentials: no token, a wrong token, or no client certificate. */
class KsidecarAuthError extends KsidecarError {}
/** The token or certificate is valid but its scopes do not cover the group or topic. */
class KsidecarPermissionError extends KsidecarError {}
/** ksidecar refused the request itself (bad group or topic name, unknown group, limits). */
class KsidecarRequestError extends KsidecarError {}
/** A wait (close, an ack result, a produce) ran past its timeout. */
class KsidecarTimeoutError extends KsidecarError {}
/** The subscriber or publisher was closed. */
class KsidecarClosedError extends KsidecarError {}
/** Produce: ksidecar answered, and this record failed (error names why). */
class KsidecarProduceError extends KsidecarError {}
/** valueJson()/keyJson(): ksidecar could not decode the key or value (message names why). */
class KsidecarDecodeError extends KsidecarError {}

const codeName = (code) => {
  for (const [k, v] of Object.entries(grpc.status)) if (v === code) return k;
  return String(code);
};

/** grpc-js details without its empty trailer ("... Resolution note: "). */
const tidy = (d) => String(d).replace(/[.\s]*Resolution note:\s*$/, '');

/**
 * Turns a grpc-js error from a call to `what` at `target` into a typed error.
 * Returns a KsidecarError whose cause is the grpc error.
 */
function fromGrpc(err, target, what) {
  const code = codeName(err.code);
  const detail = tidy(err.details || err.message);
  const opts = { code, cause: err };
  switch (err.code) {
    case grpc.status.UNAUTHENTICATED:
      return new KsidecarAuthError(
        `ksidecar at ${target} refused the credentials of ${what} (UNAUTHENTICATED): ${detail}; ` +
          'check the token (options.token) or the client certificate', opts);
    case grpc.status.PERMISSION_DENIED:
      return new KsidecarPermissionError(
        `ksidecar at ${target} denied ${what} (PERMISSION_DENIED): ${detail}`, opts);
    case grpc.status.UNAVAILABLE:
      return new KsidecarConnectError(
        `cannot reach ksidecar at ${target} for ${what} (UNAVAILABLE): ${detail}`, opts);
    case grpc.status.DEADLINE_EXCEEDED:
      return new KsidecarTimeoutError(
        `${what} at ${target} ran past its deadline (DEADLINE_EXCEEDED): ${detail}`, opts);
    default:
      return new KsidecarRequestError(
        `ksidecar at ${target} failed ${what} (${code}): ${detail}`, opts);
  }
}

module.exports = {
  KsidecarError,
  KsidecarConfigError,
  KsidecarConnectError,
  KsidecarAuthError,
  KsidecarPermissionError,
  KsidecarRequestError,
  KsidecarTimeoutError,
  KsidecarClosedError,
  KsidecarProduceError,
  KsidecarDecodeError,
  fromGrpc,
  codeName,
  tidy,
};
