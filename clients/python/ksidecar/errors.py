"""Typed errors of the ksidecar client: each names the target, the gRPC code and the problem."""
import grpc


class KsidecarError(Exception):
    """Base of every error this package raises. code is the gRPC status code name (or None
    for a local error), target the ksidecar address, details the server's message."""

    def __init__(self, message, *, code=None, target=None, details=""):
        super().__init__(message)
        self.code = code
        self.target = target
        self.details = details


class ConnectError(KsidecarError):
    """No ksidecar answered at the target (refused, unresolvable, TLS handshake failed)."""


class AuthenticationError(KsidecarError):
    """ksidecar refused the caller: no token, or a wrong one (UNAUTHENTICATED)."""


class PermissionDeniedError(KsidecarError):
    """The token's scopes do not cover the group or a topic (PERMISSION_DENIED)."""


class InvalidArgumentError(KsidecarError):
    """ksidecar rejected a request as malformed (INVALID_ARGUMENT)."""


class NotFoundError(KsidecarError):
    """An unknown group or topic (NOT_FOUND)."""


class ResourceExhaustedError(KsidecarError):
    """A ksidecar limit was hit (RESOURCE_EXHAUSTED)."""


class UnavailableError(KsidecarError):
    """ksidecar or Kafka is unavailable, and reconnecting gave up (UNAVAILABLE)."""


class StreamError(KsidecarError):
    """The Subscribe stream ended with another error."""


class ProduceError(KsidecarError):
    """Kafka refused a produced record; .results holds every record's result."""

    def __init__(self, message, *, results=(), **kw):
        super().__init__(message, **kw)
        self.results = list(results)


class ClosedError(KsidecarError):
    """The Subscriber or Publisher was used after close()."""


class DecodeError(KsidecarError):
    """A key or value in a schema format that ksidecar could not decode (an unknown schema id,
    corrupt bytes): the message says why; the message's key or value still has its bytes."""


_BY_CODE = {
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}

_HINTS = {
    grpc.StatusCode.UNAUTHENTICATED: "give the client the right token=",
    grpc.StatusCode.PERMISSION_DENIED: "the token's groups/consume/produce scopes do not cover it",
}

# Codes after which a Subscribe stream is opened again (with backoff); others end it.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                       grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
                       grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.ABORTED})


def describe(err):
    """'CODE: details' of a grpc.RpcError (or str() of anything else)."""
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return f"{err.code().name}: {err.details()}"
    return str(err)


def from_rpc(err, target, what):
    """The typed error for a failed call: what is the operation ('Subscribe to group "g"')."""
    code = err.code()
    cls = _BY_CODE.get(code, StreamError)
    hint = _HINTS.get(code)
    msg = f"{what} at ksidecar {target} failed: {code.name}: {err.details()}"
    if hint:
        msg += f" ({hint})"
    return cls(msg, code=code.name, target=target, details=err.details() or "")
