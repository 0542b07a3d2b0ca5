"""ksidecar: the Python client of ksidecar's gRPC API (Subscriber, ksidecar.aio.Subscriber, Publisher)."""
from ._common import TLS, AckResult, AckStatus, Message
from .errors import (AuthenticationError, ClosedError, ConnectError, DecodeError, InvalidArgumentError,
                     KsidecarError, NotFoundError, PermissionDeniedError, ProduceError,
                     ResourceExhaustedError, StreamError, UnavailableError)
from .publisher import ProduceResult, Publisher, Record
from .subscriber import SubscribeFuture, Subscriber

__all__ = ["TLS", "AckResult", "AckStatus", "Message", "Subscriber", "SubscribeFuture",
           "Publisher", "Record", "ProduceResult", "KsidecarError", "ConnectError", "DecodeError",
           "AuthenticationError", "PermissionDeniedError", "InvalidArgumentError",
           "NotFoundError", "ResourceExhaustedError", "UnavailableError", "StreamError",
           "ProduceError", "ClosedError"]
