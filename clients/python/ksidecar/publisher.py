"""The Publisher: records to Kafka over ksidecar's Producer.Produce."""
import dataclasses
import json

import grpc

from . import errors
from ._common import make_channel
from ._proto import ppb, ppb_grpc


@dataclasses.dataclass(frozen=True)
class Record:
    """A record to produce: value and key are bytes, str (UTF-8) or None; headers a list
    of (key, value) pairs; partition None picks one by key.

    With value_schema_id, or value_subject (and value_schema_version, a number or "latest",
    the default), value is any JSON-serializable object instead, and ksidecar writes it with
    that schema of the schema registry in Confluent's wire format (Avro or JSON Schema); a
    value that does not fit is the record's error, naming the field."""
    topic: str
    value: object
    key: object = None
    headers: tuple = ()
    partition: int = None
    value_schema_id: int = None
    value_subject: str = None
    value_schema_version: object = None


@dataclasses.dataclass(frozen=True)
class ProduceResult:
    partition: int
    offset: int
    error: str = ""

    @property
    def ok(self):
        return not self.error


def _b(v):
    return v.encode() if isinstance(v, str) else v


def _to_pb(r):
    key = _b(r.key)
    pr = ppb.ProduceRecord(
        topic=r.topic, partition=-1 if r.partition is None else r.partition,
        has_partition=r.partition is not None, key=key or b"", key_null=key is None,
        headers=[ppb.ProduceHeader(key=k, value=_b(v) or b"") for k, v in r.headers])
    if r.value_schema_id is None and r.value_subject is None:
        value = _b(r.value)
        pr.value, pr.value_null = value or b"", value is None
    else:
        pr.value_json = json.dumps(r.value)
        pr.value_schema_id = r.value_schema_id or 0
        pr.value_subject = r.value_subject or ""
        if r.value_schema_version is not None:
            pr.value_schema_version = str(r.value_schema_version)
    return pr


class Publisher:
    """Publisher(target, token=None, tls=None, timeout_s=30): produce() a batch and get
    where each record landed; publish() one record. Raises the typed errors of
    ksidecar.errors (ConnectError when nothing answers)."""

    def __init__(self, target, *, token=None, tls=None, timeout_s=30.0, channel_options=()):
        self.target = target
        self._md = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout_s
        self._channel = make_channel(target, tls, channel_options)
        self._stub = ppb_grpc.ProducerStub(self._channel)
        self._closed = False

    def produce(self, records):
        """Produces records (Record objects) in one request. Returns a ProduceResult per
        record, in order; a record Kafka refused has .error set (nothing is raised)."""
        if self._closed:
            raise errors.ClosedError("Publisher used after close()", target=self.target)
        req = ppb.ProduceRequest(records=[_to_pb(r) for r in records])
        try:
            resp = self._stub.Produce(req, metadata=self._md, timeout=self._timeout,
                                      wait_for_ready=True)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise errors.ConnectError(
                    f"Produce at ksidecar {self.target}: no answer within {self._timeout:g} s "
                    f"({errors.describe(e)})", code=e.code().name, target=self.target) from None
            raise errors.from_rpc(e, self.target, f"Produce of {len(req.records)} records") from None
        return [ProduceResult(r.partition, r.offset, r.error) for r in resp.results]

    def publish(self, topic, value, *, key=None, headers=(), partition=None,
                value_schema_id=None, value_subject=None, value_schema_version=None):
        """Produces one record (Record says what the arguments take); returns its
        ProduceResult, or raises ProduceError."""
        res = self.produce([Record(topic, value, key, tuple(headers), partition, value_schema_id,
                                   value_subject, value_schema_version)])[0]
        if res.error:
            raise errors.ProduceError(f"Produce to {topic!r} at ksidecar {self.target}: {res.error}",
                                      results=[res], target=self.target, details=res.error)
        return res

    def close(self):
        self._closed = True
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
