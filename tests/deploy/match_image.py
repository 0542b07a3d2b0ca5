"""match_image.py: holds docker/compose.yaml and docker/k8s/sidecar.yaml to the image that
docker/Dockerfile builds. The image is read from the Dockerfile's last stage (ENV, EXPOSE, USER,
COPY); ksidecar itself says what a service's command, environment and config files mean
(`ksidecar --print-config`, which refuses an unknown key), and a running ksidecar answers the
manifest's probes.

Compose: the ksidecar service's command and environment load; its published ports are exactly
the listen ports, on listeners that take outside connections; every other service's reference
to ksidecar:PORT names a listener (http:// the HTTP one); the broker is the service and port
that kafka.bootstrap.servers names, advertised so, running the Apache Kafka version the tests
use (tests/kafka/pom.xml); stop_grace_period covers shutdown.grace_ms.
Kubernetes: the ConfigMap's config and the Secret's tokens file, mounted where the pod mounts
them, load with the container's environment; the pod's user is the image's; each probe's port
is a listener the kubelet can reach, and a ksidecar started so (in --dev mode, on free ports)
answers each probe, and the scrape annotation's path, with 200; the app container's
KSIDECAR_URL and KSIDECAR_GRPC name the HTTP and gRPC listeners.

Usage: match_image.py KSIDECAR_BINARY (from the repository's root). Exit 1 with one line per
mismatch."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

BIN = os.path.abspath(sys.argv[1])
problems = []


def bad(where, what):
    problems.append(f"{where}: {what}")


def dockerfile_image(path):
    """The last stage of a Dockerfile: env, exposed ports, user, and {image path: repo path}
    of its COPY lines from the build context."""
    text = re.sub(r"\\\n", " ", open(path).read())
    img = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            img = {"env": {}, "expose": set(), "user": "", "files": {}}
        elif op == "ENV":
            words = shlex.split(rest)
            if words and "=" not in words[0]:
                img["env"][words[0]] = " ".join(words[1:])
            else:
                img["env"].update(w.split("=", 1) for w in words)
        elif op == "EXPOSE":
            img["expose"] |= {int(p.split("/")[0]) for p in rest.split()}
        elif op == "USER":
            img["user"] = rest.strip()
        elif op == "COPY" and not rest.startswith("--from"):
            words = [w for w in rest.split() if not w.startswith("--")]
            if len(words) == 2:
                img["files"][words[1]] = words[0]
    return img


def print_config(where, args, env):
    """ksidecar's reading of args and env (and the config file env names), or None."""
    out = subprocess.run([BIN, *args, "--print-config"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], **env}, timeout=30)
    if out.returncode != 0:
        bad(where, f"ksidecar --print-config refuses it: {out.stderr.strip()}")
        return None
    return json.loads(out.stdout)


LISTENERS = {"http.listen": "HTTP", "grpc.listen": "gRPC", "http.health_listen": "probe"}


def listeners(cfg):
    """{port: (config key, host)} of the listeners cfg turns on."""
    out = {}
    for key in LISTENERS:
        if cfg.get(key):
            host, port = cfg[key].rsplit(":", 1)
            out[int(port)] = (key, host)
    return out


def outside(host):
    return host in ("", "*", "0.0.0.0")


def check_compose(image, pom_kafka, tmp):
    where = "docker/compose.yaml"
    doc = yaml.safe_load(open(where))
    services = doc["services"]
    name, svc = next(((n, s) for n, s in services.items()
                      if (s.get("build") or {}).get("dockerfile") == "docker/Dockerfile"),
                     (None, None))
    if not svc:
        bad(where, "no service builds docker/Dockerfile")
        return
    where += f" service {name}"
    if svc.get("entrypoint"):
        bad(where, "overrides the image's entrypoint (ksidecar)")
    envl = svc.get("environment") or {}
    if isinstance(envl, list):
        envl = dict(e.split("=", 1) for e in envl)
    env = {**image["env"], **{k: str(v) for k, v in envl.items()}}
    mounts = dict(image["files"])
    for v in svc.get("volumes", []):
        src, dst = v.split(":")[:2]
        mounts[dst] = os.path.normpath(os.path.join("docker", src))
    env = {k: mounts.get(v, v) for k, v in env.items()}
    cmd = svc.get("command") or []
    cmd = shlex.split(cmd) if isinstance(cmd, str) else cmd
    cfg = print_config(where, cmd, env)
    if cfg is None:
        return
    listen = listeners(cfg)
    published = set()
    for p in svc.get("ports", []):
        published.add(int(str(p).split(":")[-1].split("/")[0]))
    for port in published - set(listen):
        bad(where, f"publishes port {port}, on which ksidecar does not listen")
    for port, (key, host) in listen.items():
        if port not in published:
            bad(where, f"does not publish port {port} ({key})")
        elif not outside(host):
            bad(where, f"publishes port {port}, but {key} listens on {host} only")
    for other, osvc in services.items():
        envo = osvc.get("environment") or {}
        values = envo.values() if isinstance(envo, dict) else [e.split("=", 1)[-1] for e in envo]
        for val in map(str, values):
            for m in re.finditer(rf"(\w+://)?\b{re.escape(name)}:(\d+)", val):
                port = int(m.group(2))
                if port not in listen:
                    bad(f"docker/compose.yaml service {other}", f"{val}: ksidecar does not "
                        f"listen on {port}")
                elif m.group(1) == "http://" and listen[port][0] != "http.listen":
                    bad(f"docker/compose.yaml service {other}", f"{val}: port {port} is "
                        f"{listen[port][0]}, not http.listen")
    for server in cfg["kafka.bootstrap.servers"].split(","):
        host, port = server.rsplit(":", 1)
        broker = services.get(host)
        if broker is None:
            bad(where, f"kafka.bootstrap.servers names {host}, which is no service")
            continue
        adv = str((broker.get("environment") or {}).get("KAFKA_ADVERTISED_LISTENERS", ""))
        if f"//{host}:{port}" not in adv:
            bad(f"docker/compose.yaml service {host}", f"does not advertise {server}: {adv}")
        tag = broker.get("image", "").rsplit(":", 1)[-1]
        if tag != pom_kafka:
            bad(f"docker/compose.yaml service {host}", f"runs Kafka {tag}, the tests "
                f"{pom_kafka} (tests/kafka/pom.xml)")
    grace = svc.get("stop_grace_period")
    unit_ms = {"h": 3600000, "m": 60000, "s": 1000, "ms": 1, "us": 0.001}
    grace_ms = sum(int(n) * unit_ms[u] for n, u in re.findall(r"(\d+)(ms|us|h|m|s)", str(grace)))
    if grace_ms <= cfg["shutdown.grace_ms"]:
        bad(where, f"stop_grace_period {grace} does not cover shutdown.grace_ms "
            f"({cfg['shutdown.grace_ms']} ms)")
    # Started so (its Kafka is not here: /healthz answers 503), it takes its kafka.* keys.
    health = [(f"{key} /healthz", port, "/healthz") for port, (key, _) in listen.items()
              if key != "grpc.listen"]
    if not problems:
        ran = run_and_ask(where, cmd, env, listen, health, tmp, ok=(200, 503))
        print(f"compose: {name} loads and starts; published {sorted(published)}; answered {ran}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_connect(port, timeout):
    """None once 127.0.0.1:port takes a connection within timeout s, else the last error."""
    end, err = time.time() + timeout, None
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return None
        except OSError as e:
            err = e
        time.sleep(0.3)
    return err


def wait_answer(url, timeout, ok):
    """The status of GET url, waiting up to timeout s for one in ok (or the last status)."""
    end, status = time.time() + timeout, None
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            status = e.code
            if status in ok:
                return status
        except OSError as e:
            status = str(e)
        time.sleep(0.3)
    return status


def run_and_ask(where, args, env, listen, asks, tmp, ok=(200,)):
    """Starts ksidecar with args and env, each listener moved to a free port of 127.0.0.1, and
    asks it each (what, port, path) of asks (path None: a TCP connection), waiting up to 30 s
    for an answer in ok; then SIGTERM, which must end it with 0. Returns what was answered."""
    moved = {port: free_port() for port in listen}
    env = dict(env)
    for port, (key, _) in listen.items():
        env["KSIDECAR_" + key.upper().replace(".", "_")] = f"127.0.0.1:{moved[port]}"
    log = open(os.path.join(tmp, "ksidecar.log"), "w+")
    p = subprocess.Popen([BIN, *args], stdout=log, stderr=subprocess.STDOUT,
                         env={"PATH": os.environ["PATH"], **env})
    said = []
    try:
        for what, port, path in asks:
            if path is None:
                err = wait_connect(moved[port], 30)
                if err:
                    bad(where, f"{what}: port {port} does not take a connection: {err}")
                said.append(f"{what} (tcp on {port})")
                continue
            status = wait_answer(f"http://127.0.0.1:{moved[port]}{path}", 30, ok)
            if status not in ok:
                bad(where, f"{what}: GET {path} on port {port} answers {status}")
            said.append(f"{what} ({path} on {port}: {status})")
    finally:
        early = p.poll() is not None
        if not early:
            p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        if rc != 0:
            log.seek(0)
            bad(where, f"ksidecar exited {rc} {'by itself' if early else 'on SIGTERM'}: "
                f"{log.read()[-1500:]}")
    return ", ".join(said)


def check_k8s(image, tmp):
    where = "docker/k8s/sidecar.yaml"
    docs = [d for d in yaml.safe_load_all(open(where)) if d]
    data = {(d["kind"], d["metadata"]["name"]): {**d.get("data", {}), **d.get("stringData", {})}
            for d in docs if d["kind"] in ("ConfigMap", "Secret")}
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    cons = spec.get("initContainers", []) + spec["containers"]
    ks = next((c for c in cons if c["image"].split(":")[0].endswith("ksidecar")), None)
    if not ks:
        bad(where, "no container runs the ksidecar image")
        return
    where += f" container {ks['name']}"
    # The mounted ConfigMaps and Secrets, written under tmp where the pod mounts them.
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    root = os.path.join(tmp, "k8s")
    for m in ks.get("volumeMounts", []):
        v = volumes[m["name"]]
        src = (("ConfigMap", v["configMap"]["name"]) if "configMap" in v
               else ("Secret", v["secret"]["secretName"]))
        for key, text in data[src].items():
            os.makedirs(root + m["mountPath"], exist_ok=True)
            for mm in ks.get("volumeMounts", []):
                text = text.replace(mm["mountPath"], root + mm["mountPath"])
            open(os.path.join(root + m["mountPath"], key), "w").write(text)
    env = {}
    for e in ks.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)),
                                    e["value"])
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = f"{dep['metadata']['name']}-7d9f8-x2x4q"
    env = {k: v for k, v in {**image["env"], **env}.items() if k.startswith("KSIDECAR_")}
    for m in ks.get("volumeMounts", []):
        env = {k: v.replace(m["mountPath"], root + m["mountPath"]) for k, v in env.items()}
    cfg = print_config(where, ks.get("args", []), env)
    if cfg is None:
        return
    pod_uid = (spec.get("securityContext") or {}).get("runAsUser")
    uid = (ks.get("securityContext") or {}).get("runAsUser", pod_uid)
    if str(uid) != image["user"].split(":")[0]:
        bad(where, f"runs as user {uid}, the image as {image['user']}")
    listen = listeners(cfg)
    named = {p["name"]: p["containerPort"] for p in ks.get("ports", []) if "name" in p}
    for p in ks.get("ports", []):
        if p["containerPort"] not in listen:
            bad(where, f"declares port {p['containerPort']}, on which ksidecar does not listen")
    probes = []  # (what, port, path or None)
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        pr = ks.get(kind)
        if pr:
            how = pr.get("httpGet") or pr.get("tcpSocket")
            if not how or "scheme" in how and how["scheme"] != "HTTP":
                bad(where, f"{kind} is neither a plain httpGet nor a tcpSocket")
                continue
            probes.append((kind, named.get(how["port"], how["port"]), how.get("path")))
    ann = pod["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") == "true":
        probes.append(("the scrape annotations", int(ann["prometheus.io/port"]),
                       ann.get("prometheus.io/path", "/metrics")))
    for what, port, _ in probes:
        if port not in listen:
            bad(where, f"{what}: ksidecar does not listen on {port}")
        elif not outside(listen[port][1]):
            bad(where, f"{what}: port {port} is {listen[port][0]} on {listen[port][1]}, "
                "which the kubelet cannot reach")
    for c in cons:
        if c is ks:
            continue
        for e in c.get("env", []):
            want = {"KSIDECAR_URL": "http.listen", "KSIDECAR_GRPC": "grpc.listen"}.get(e["name"])
            m = re.search(r":(\d+)", e.get("value", "")) if want else None
            if m and listen.get(int(m.group(1)), ("",))[0] != want:
                bad(f"docker/k8s/sidecar.yaml container {c['name']}",
                    f"{e['name']}={e['value']} is not ksidecar's {want} ({cfg.get(want)})")
    if not problems:
        # Run so, in --dev mode as the config's Kafka is not here.
        ran = run_and_ask(where, [*ks.get("args", []), "--dev"], env, listen, probes, tmp)
        print(f"k8s: {ks['name']} loads; listens on {sorted(listen)}; answered " + ran)


def main():
    image = dockerfile_image("docker/Dockerfile")
    pom = open("tests/kafka/pom.xml").read()
    pom_kafka = re.search(r"<kafka.version>(.*)</kafka.version>", pom).group(1)
    # The image's own ports: EXPOSE names exactly its listeners.
    env = {k: image["files"].get(v, v) for k, v in image["env"].items()}
    cfg = print_config("docker/Dockerfile ENV", [], env)
    if cfg and set(listeners(cfg)) != image["expose"]:
        bad("docker/Dockerfile", f"EXPOSE {sorted(image['expose'])}, but ksidecar listens on "
            f"{sorted(listeners(cfg))}")
    with tempfile.TemporaryDirectory() as tmp:
        check_compose(image, pom_kafka, tmp)
        check_k8s(image, tmp)
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


main()
