"""A small Python client for ksidecar's gRPC API.

Stubs are generated from the repository's proto/ directory at import time with grpcio-tools,
so nothing generated is committed. Needs: pip install grpcio grpcio-tools.

    from ksidecar_client import Subscriber
    with Subscriber("127.0.0.1:50051", "my-group", ["orders"]) as sub:
        for record in sub.records():
            handle(record)
            sub.ack(record)
"""
import importlib
import os
import pathlib
import queue
import sys
import tempfile
import threading

import grpc
from grpc_tools import protoc

PROTO_DIR = pathlib.Path(os.environ.get("KSIDECAR_PROTO_DIR",
                                        pathlib.Path(__file__).resolve().parents[2] / "proto"))


def _generate():
    out = tempfile.mkdtemp(prefix="ksidecar-stubs-")
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    files = ["ksidecar/v1/consumer.proto", "ksidecar/v1/producer.proto"]
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out}",
                      f"--grpc_python_out={out}", *files])
    if rc != 0:
        raise RuntimeError(f"generating stubs from {PROTO_DIR} failed ({rc})")
    sys.path.insert(0, out)
    return (importlib.import_module("ksidecar.v1.consumer_pb2"),
            importlib.import_module("ksidecar.v1.consumer_pb2_grpc"))


pb, pb_grpc = _generate()


class Subscriber:
    """One Subscribe stream: iterate records(), then ack() or nack() each one."""

    def __init__(self, target, group, topics, credits=500, deadline_ms=0, metadata=None,
                 channel=None):
        self._channel = channel or grpc.insecure_channel(target)
        self._stub = pb_grpc.ConsumerStub(self._channel)
        self._out = queue.Queue()
        self._out.put(pb.SubscribeRequest(open=pb.Open(
            group=group, topics=list(topics), credits=pb.Credits(records=credits),
            deadline_ms=deadline_ms)))
        self._call = self._stub.Subscribe(iter(self._out.get, None), metadata=metadata)
        self.ack_results = queue.Queue()
        self._lock = threading.Lock()

    def records(self):
        """Yields records as they come; ack results go to self.ack_results."""
        for resp in self._call:
            kind = resp.WhichOneof("kind")
            if kind == "batch":
                yield from resp.batch.records
            elif kind == "ack_results":
                for r in resp.ack_results.results:
                    self.ack_results.put(r)

    def wait_ack_results(self, n):
        """Reads the stream until n ack results came (records meanwhile are left leased,
        and go back to the pool when the stream closes). Returns the results."""
        got = []
        while len(got) < n and not self.ack_results.empty():
            got.append(self.ack_results.get())
        for resp in self._call:
            if resp.WhichOneof("kind") == "ack_results":
                got.extend(resp.ack_results.results)
            if len(got) >= n:
                break
        return got

    def ack(self, *records):
        self._out.put(pb.SubscribeRequest(ack=pb.AckIds(ack_ids=[r.ack_id for r in records])))

    def nack(self, *records, delay_ms=0, reason=""):
        self._out.put(pb.SubscribeRequest(nack=pb.NackIds(
            ack_ids=[r.ack_id for r in records], delay_ms=delay_ms, reason=reason)))

    def close(self):
        self._out.put(None)  # half-close: the server ends the stream
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":
    # python3 clients/python/ksidecar_client.py 127.0.0.1:50051 demo-group demo 5
    target, group, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with Subscriber(target, group, [topic]) as sub:
        for i, rec in enumerate(sub.records()):
            print(f"{rec.topic}[{rec.partition}]@{rec.offset} key={rec.key.decode()} "
                  f"value={rec.value.decode()} attempt={rec.attempt}")
            sub.ack(rec)
            if i + 1 == n:
                break
        for res in sub.wait_ack_results(n):
            print(f"ack {res.ack_id}: {pb.AckStatus.Name(res.status)}")
