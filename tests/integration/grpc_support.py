"""gRPC support for the integration tests.

Python stubs are generated at import time from proto/ with grpc_tools.protoc into a temporary
directory that is put first on sys.path; they are exposed here as consumer_pb2,
consumer_pb2_grpc, producer_pb2, producer_pb2_grpc, health_pb2 and health_pb2_grpc.

The generated grpc/health/v1 modules would import themselves as `grpc.health.v1`, which is
inside the installed `grpc` package: they are moved to a package of their own
(`ksidecar_test_grpc_health_v1`) and that one import line is rewritten. The wire names
(`/grpc.health.v1.Health/Check`) are unchanged.

Also here: starting a sidecar with its gRPC listener on a free port and waiting for it,
a sidecar with TLS, mTLS or bearer-token auth (HTTP probed over https and with the token),
a driver for one Subscribe stream, test certificates made with the openssl CLI, and the
path of grpcurl.
"""
import atexit
import hashlib
import importlib
import importlib.resources
import json
import os
import pathlib
import queue
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import grpc
from grpc_tools import protoc

from conftest import ROOT, Sidecar, free_port

PROTO_DIR = ROOT / "proto"
PROTOS = ["ksidecar/v1/consumer.proto", "ksidecar/v1/producer.proto",
          "grpc/health/v1/health.proto"]
HEALTH_PKG = "ksidecar_test_grpc_health_v1"


def _generate_stubs():
    out = pathlib.Path(tempfile.mkdtemp(prefix="ksidecar-grpc-stubs-"))
    atexit.register(shutil.rmtree, str(out), True)
    wkt = str(importlib.resources.files("grpc_tools") / "_proto")  # google/protobuf/*.proto
    args = ["grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{wkt}", f"--python_out={out}",
            f"--grpc_python_out={out}", *PROTOS]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed with {rc}: {' '.join(args)}")
    # Regular packages, so that nothing else named ksidecar on sys.path can shadow them.
    for d in (out / "ksidecar", out / "ksidecar" / "v1"):
        (d / "__init__.py").touch()
    # grpc/health/v1 -> ksidecar_test_grpc_health_v1 (see the module docstring).
    hdir = out / HEALTH_PKG
    hdir.mkdir()
    (hdir / "__init__.py").touch()
    src = out / "grpc" / "health" / "v1"
    shutil.move(str(src / "health_pb2.py"), str(hdir / "health_pb2.py"))
    text = (src / "health_pb2_grpc.py").read_text()
    old = "from grpc.health.v1 import health_pb2"
    if old not in text:
        raise RuntimeError(f"unexpected generated health_pb2_grpc.py: no line {old!r}")
    (hdir / "health_pb2_grpc.py").write_text(text.replace(old, f"from {HEALTH_PKG} import health_pb2"))
    shutil.rmtree(str(out / "grpc"))
    sys.path.insert(0, str(out))
    importlib.invalidate_caches()
    return out


STUB_DIR = _generate_stubs()
consumer_pb2 = importlib.import_module("ksidecar.v1.consumer_pb2")
consumer_pb2_grpc = importlib.import_module("ksidecar.v1.consumer_pb2_grpc")
producer_pb2 = importlib.import_module("ksidecar.v1.producer_pb2")
producer_pb2_grpc = importlib.import_module("ksidecar.v1.producer_pb2_grpc")
health_pb2 = importlib.import_module(f"{HEALTH_PKG}.health_pb2")
health_pb2_grpc = importlib.import_module(f"{HEALTH_PKG}.health_pb2_grpc")

SERVING = health_pb2.HealthCheckResponse.SERVING
ACCEPTED = consumer_pb2.ACCEPTED
STALE = consumer_pb2.STALE
INVALID = consumer_pb2.INVALID


def grpcurl_path():
    """grpcurl from KSIDECAR_TEST_GRPCURL, else from PATH, else where the scripts install it
    (~/.cache/ksidecar/bin); None when there is none."""
    for p in (os.environ.get("KSIDECAR_TEST_GRPCURL"), shutil.which("grpcurl"),
              os.path.expanduser("~/.cache/ksidecar/bin/grpcurl")):
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def wait_channel_ready(channel, timeout, sc=None, what="gRPC channel"):
    """Waits until the channel connects (TCP and, for a secure channel, the TLS handshake)."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        logs = ""
        if sc is not None:
            state = "running" if sc.proc.poll() is None else f"exited {sc.proc.returncode}"
            logs = f"\nksidecar ({state}) log:\n{sc.logs()}"
        raise AssertionError(f"{what} not ready within {timeout}s{logs}") from None


def _attach_stubs(sc, channel):
    sc.channel = channel
    sc.consumer = consumer_pb2_grpc.ConsumerStub(channel)
    sc.producer = producer_pb2_grpc.ProducerStub(channel)
    sc.health = health_pb2_grpc.HealthStub(channel)


def start_grpc(sidecars, args=(), env=None, timeout=20):
    """Starts a sidecar (through the conftest `sidecars` fixture) with its gRPC listener on a
    free port, and waits until a plaintext channel to it is ready. The sidecar gets
    .grpc_port, .grpc_target, .channel and the stubs .consumer, .producer and .health."""
    port = free_port()
    sc = sidecars([f"--grpc.listen=127.0.0.1:{port}", *args], env=env)
    sc.grpc_port = port
    sc.grpc_target = f"127.0.0.1:{port}"
    ch = grpc.insecure_channel(sc.grpc_target)
    wait_channel_ready(ch, timeout, sc)
    _attach_stubs(sc, ch)
    return sc


def bearer(token):
    return (("authorization", f"Bearer {token}"),)


def write_tokens_file(path, entries):
    """entries: [(token, "pattern1,pattern2")]. Writes '<sha256 hex> <patterns>' lines, with a
    comment and a blank line, which the server must ignore."""
    lines = ["# ksidecar test tokens: sha256(token) patterns", ""]
    lines += [f"{hashlib.sha256(t.encode()).hexdigest()} {pats}" for t, pats in entries]
    pathlib.Path(path).write_text("\n".join(lines) + "\n")
    return str(path)


def write_tokens_json(path, entries):
    """entries: [{"token": t | "subject": dn, "groups": [...], "consume": [...], "produce": [...]}].
    Writes the JSON tokens file, a token kept as the hex of its SHA-256."""
    out = []
    for e in entries:
        e = dict(e)
        if "token" in e:
            e["sha256"] = hashlib.sha256(e.pop("token").encode()).hexdigest()
        out.append(e)
    pathlib.Path(path).write_text(json.dumps({"tokens": out}, indent=1) + "\n")
    return str(path)


def make_client_cert(pki, name, subject):
    """A client certificate for `subject` (openssl -subj form, "/O=Acme/CN=app1") signed by
    the CA make_certs made in `pki`. Returns (cert path, key path)."""
    d = pathlib.Path(pki)
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "client.ext", "-out", f"{name}.pem",
             cwd=d)
    return str(d / f"{name}.pem"), str(d / f"{name}.key")


def _json_or_raw(data):
    try:
        return json.loads(data or b"null")
    except ValueError:
        return {"raw": data.decode(errors="replace")}


_UNSET = object()


class SecureSidecar(Sidecar):
    """A sidecar with gRPC on a free port and, optionally, TLS (`cert`/`key`, clients trust
    `ca`), mTLS (`client_ca`; this client then presents `client_cert`/`client_key`) and
    bearer-token auth (`tokens_file`; this client then sends `token`). Its HTTP requests go
    over https and carry the token, so the startup /healthz probe works in every mode."""

    def __init__(self, bootstrap, args=(), env=None, tmp_path=None, *, ca=None, cert=None,
                 key=None, client_ca=None, client_cert=None, client_key=None, tokens_file=None,
                 token=None, ready_timeout=20):
        self.grpc_port = free_port()
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.ca, self.client_cert, self.client_key = ca, client_cert, client_key
        self.token = token
        self.tls = bool(cert)
        flags = [f"--grpc.listen={self.grpc_target}"]
        if cert:
            flags += [f"--tls.cert_file={cert}", f"--tls.key_file={key}"]
        if client_ca:
            flags += [f"--tls.client_ca_file={client_ca}"]
        if tokens_file:
            flags += [f"--auth.tokens_file={tokens_file}"]
        self.scheme = "https" if self.tls else "http"
        self.ssl_context = self.make_ssl_context() if self.tls else None
        try:
            super().__init__(bootstrap, args=[*flags, *args], env=env, tmp_path=tmp_path)
            self.base = f"{self.scheme}://127.0.0.1:{self.port}"
            ch = self.make_channel()
            wait_channel_ready(ch, ready_timeout, self)
            _attach_stubs(self, ch)
        except BaseException:
            # The fixture never saw this object: do not leave the process behind.
            proc = getattr(self, "proc", None)
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            if getattr(self, "log", None) is not None:
                self.log.close()
            raise

    def make_ssl_context(self, with_client_cert=True):
        ctx = ssl.create_default_context(cafile=self.ca)
        if with_client_cert and self.client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def make_channel(self, with_client_cert=True):
        if not self.tls:
            return grpc.insecure_channel(self.grpc_target)
        kw = {"root_certificates": pathlib.Path(self.ca).read_bytes()}
        if with_client_cert and self.client_cert:
            kw["private_key"] = pathlib.Path(self.client_key).read_bytes()
            kw["certificate_chain"] = pathlib.Path(self.client_cert).read_bytes()
        return grpc.secure_channel(self.grpc_target, grpc.ssl_channel_credentials(**kw))

    def request(self, method, path, body=None, raw=None, timeout=90, token=_UNSET, context=_UNSET):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/json"}
        tok = self.token if token is _UNSET else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        ctx = self.ssl_context if context is _UNSET else context
        req = urllib.request.Request(f"{self.scheme}://127.0.0.1:{self.port}{path}", data=data,
                                     method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                return r.status, _json_or_raw(r.read())
        except urllib.error.HTTPError as e:
            return e.code, _json_or_raw(e.read())


class StreamClosed(Exception):
    def __init__(self, error):
        super().__init__(f"Subscribe stream ended: {error!r}")
        self.error = error


_END = object()


class SubscribeStream:
    """One Consumer.Subscribe stream: requests go through a queue, responses are read by a
    background thread into another queue. By default the first request is open=`open_msg`;
    give `first` to send any other first request instead."""

    def __init__(self, stub, open_msg=None, first=None, metadata=None, timeout=None):
        self._requests = queue.Queue()
        self._responses = queue.Queue()
        self.error = None  # the grpc.RpcError the stream ended with, if any
        self.done = threading.Event()
        if first is None:
            first = consumer_pb2.SubscribeRequest(open=open_msg)
        self._requests.put(first)
        self.call = stub.Subscribe(self._request_iter(), metadata=metadata, timeout=timeout)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _request_iter(self):
        while True:
            m = self._requests.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for r in self.call:
                self._responses.put(r)
        except grpc.RpcError as e:
            self.error = e
        finally:
            self.done.set()
            self._responses.put(_END)

    def send(self, **kind):
        self._requests.put(consumer_pb2.SubscribeRequest(**kind))

    def ack(self, ids):
        self.send(ack=consumer_pb2.AckIds(ack_ids=list(ids)))

    def nack(self, ids, delay_ms=0, reason=""):
        self.send(nack=consumer_pb2.NackIds(ack_ids=list(ids), delay_ms=delay_ms, reason=reason))

    def credits(self, records, bytes=0):
        self.send(credits=consumer_pb2.Credits(records=records, bytes=bytes))

    def get(self, timeout):
        """The next SubscribeResponse, or None when none came within `timeout` seconds.
        Raises StreamClosed once the stream has ended."""
        try:
            item = self._responses.get(timeout=max(timeout, 0))
        except queue.Empty:
            return None
        if item is _END:
            self._responses.put(_END)
            raise StreamClosed(self.error)
        return item

    def half_close(self):
        self._requests.put(None)

    def cancel(self):
        self.call.cancel()
        self._requests.put(None)  # ends the request iterator's thread

    def wait_closed(self, timeout):
        """Waits for the stream to end; returns its grpc.StatusCode (OK if it ended cleanly)."""
        if not self.done.wait(timeout):
            raise AssertionError(f"Subscribe stream still open after {timeout}s")
        return self.error.code() if self.error is not None else grpc.StatusCode.OK


def open_msg(group, topics, records=0, bytes=0, deadline_ms=0, subscriber=""):
    if isinstance(topics, str):
        topics = [topics]
    return consumer_pb2.Open(group=group, topics=list(topics),
                             credits=consumer_pb2.Credits(records=records, bytes=bytes),
                             deadline_ms=deadline_ms, subscriber=subscriber)


def rpc_code(fn, *args, **kwargs):
    """Calls a unary RPC; returns (StatusCode, details, elapsed seconds)."""
    t0 = time.time()
    try:
        fn(*args, **kwargs)
        return grpc.StatusCode.OK, "", time.time() - t0
    except grpc.RpcError as e:
        return e.code(), e.details(), time.time() - t0


def _varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _pb_fields(buf):
    """(field number, value) for each field of a serialized message; length-delimited values
    as bytes, varints as ints. Enough for the reflection messages."""
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            n, i = _read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, v


def _read_varint(buf, i):
    shift = res = 0
    while True:
        b = buf[i]
        i += 1
        res |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return res, i


def reflection_call(channel, version, field, value, timeout=10):
    """One ServerReflectionInfo exchange on grpc.reflection.<version> (v1 or v1alpha), with the
    request built by hand (field 7 list_services, 4 file_containing_symbol, ...). Returns
    {response field number: value} of the one response; raises AssertionError on an
    error_response (field 7)."""
    method = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    call = channel.stream_stream(method, request_serializer=lambda x: x,
                                 response_deserializer=lambda x: x)
    req = bytes([(field << 3) | 2]) + _varint(len(value)) + value
    resps = list(call(iter([req]), timeout=timeout))
    assert len(resps) == 1, resps
    fields = {}
    for num, v in _pb_fields(resps[0]):
        fields.setdefault(num, []).append(v)
    assert 7 not in fields, f"reflection error_response: {fields[7]!r}"
    return fields


def reflection_services(channel, version):
    """Service names the server lists through reflection `version`."""
    resp = reflection_call(channel, version, 7, b"*")
    (lst,) = resp[6]  # list_services_response
    return [dict(_pb_fields(svc))[1].decode() for num, svc in _pb_fields(lst) if num == 1]


def reflection_file_containing(channel, version, symbol):
    """FileDescriptorProtos (parsed) the server returns for `symbol`."""
    from google.protobuf import descriptor_pb2
    resp = reflection_call(channel, version, 4, symbol.encode())
    (fdr,) = resp[4]  # file_descriptor_response
    return [descriptor_pb2.FileDescriptorProto.FromString(v)
            for num, v in _pb_fields(fdr) if num == 1]


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def make_certs(d):
    """A test CA, a server certificate for 127.0.0.1 and localhost, and a client certificate,
    made with the openssl CLI in directory `d`. Returns {name: path}."""
    d = pathlib.Path(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "ca.ext").write_text("basicConstraints=critical,CA:TRUE\n"
                              "keyUsage=critical,keyCertSign,cRLSign\n"
                              "subjectKeyIdentifier=hash\n")
    (d / "server.ext").write_text("basicConstraints=CA:FALSE\n"
                                  "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                  "extendedKeyUsage=serverAuth\n"
                                  "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "authorityKeyIdentifier=keyid\n")
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\n"
                                  "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                  "extendedKeyUsage=clientAuth\n"
                                  "authorityKeyIdentifier=keyid\n")
    for name in ("ca", "server", "client"):
        _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", "ca.key", "-subj", "/CN=ksidecar test CA", "-out", "ca.csr",
             cwd=d)
    _openssl("x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-days", "2",
             "-extfile", "ca.ext", "-out", "ca.pem", cwd=d)
    for name, cn in (("server", "127.0.0.1"), ("client", "ksidecar-test-client")):
        _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={cn}", "-out",
                 f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=d)
    return {"ca": str(d / "ca.pem"), "server_cert": str(d / "server.pem"),
            "server_key": str(d / "server.key"), "client_cert": str(d / "client.pem"),
            "client_key": str(d / "client.key")}
