"""The daemon's command line: config from file, flags and environment; clear startup errors."""
import json
import os
import subprocess

from conftest import BIN


def run(args, env=None, timeout=20):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**{k: v for k, v in os.environ.items()
                                  if not k.startswith("KSIDECAR_") or k.startswith("KSIDECAR_TEST")},
                               **(env or {})})


def test_help_and_version():
    r = run(["--help"])
    assert r.returncode == 0
    for key in ["--commit.interval_ms", "--http.listen", "--kafka.<property>", "KSIDECAR_LOG_LEVEL"]:
        assert key in r.stdout
    r = run(["--version"])
    assert r.returncode == 0 and r.stdout.startswith("ksidecar ")


def test_print_config_merges_file_env_flags_and_masks_secrets(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"kafka": {"bootstrap.servers": "file:9092",
                                         "sasl.password": "hunter2"},
                               "commit": {"interval_ms": 700}, "log.level": "debug",
                               "fetch": {"max_records": 50}}))
    r = run(["--config", str(cfg), "--print-config", "--fetch.max_records=60"],
            env={"KSIDECAR_COMMIT_INTERVAL_MS": "800", "KSIDECAR_KAFKA_CLIENT_ID": "from-env"})
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert c["kafka.bootstrap.servers"] == "file:9092"
    assert c["kafka.sasl.password"] == "********" and "hunter2" not in r.stdout
    assert c["commit.interval_ms"] == 800  # env beats file
    assert c["fetch.max_records"] == 60  # flag beats file
    assert c["log.level"] == "debug"
    assert c["kafka.client.id"] == "from-env"


def test_bad_config_stops_startup_with_exit_2_naming_the_key(tmp_path):
    cases = [
        (["--dev", "--no.such.key=1"], "no.such.key"),
        (["--dev", "--commit.interval_ms=abc"], "commit.interval_ms"),
        (["--dev", "--commit.interval_ms=0"], "commit.interval_ms"),
        (["--dev", "--log.level=loud"], "log.level"),
        ([], "kafka.bootstrap.servers"),
    ]
    for args, key in cases:
        r = run(args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert key in r.stderr, (args, r.stderr)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"window": {"max_records": "lots"}}))
    r = run(["--dev", "--config", str(bad)])
    assert r.returncode == 2 and "window.max_records" in r.stderr and "expected" in r.stderr
    r = run(["--dev"], env={"KSIDECAR_BOGUS": "1"})
    assert r.returncode == 2 and "KSIDECAR_BOGUS" in r.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    r = run(["--config", str(broken)])
    assert r.returncode == 2 and "broken.json" in r.stderr
    # A kafka.* property librdkafka rejects is named too.
    r = run(["--kafka.bootstrap.servers=127.0.0.1:1", "--kafka.no.such.prop=1",
             "--http.listen=127.0.0.1:0"], timeout=30)
    assert r.returncode == 2 and "kafka.no.such.prop" in r.stderr, r.stderr


def test_json_log_lines(tmp_path):
    import signal
    import time
    port = __import__("conftest").free_port()
    p = subprocess.Popen([BIN, "--dev", "--log.format=json", "--log.level=debug",
                          f"--http.listen=127.0.0.1:{port}", "--grpc.listen="],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) >= 3
    for l in lines:
        if l.startswith("%"):  # librdkafka's own mock-cluster notice, before our logger
            continue
        rec = json.loads(l)
        assert {"ts", "level", "component", "msg"} <= set(rec), rec
    assert any(json.loads(l)["level"] == "info" for l in lines if not l.startswith("%"))


def test_healthcheck_asks_healthz_of_the_listener_the_config_names(bootstrap):
    """`ksidecar --healthcheck`, the image's HEALTHCHECK: exit 0 on /healthz's 200, 1 on a
    503 or no answer; the probe listener first, else http.listen; 0.0.0.0 asked on loopback."""
    import signal
    import time
    from conftest import free_port
    http, health, dead_http, dead_health = free_port(), free_port(), free_port(), free_port()
    up = subprocess.Popen([BIN, f"--kafka.bootstrap.servers={bootstrap}", "--grpc.listen=",
                           f"--http.listen=127.0.0.1:{http}",
                           f"--http.health_listen=127.0.0.1:{health}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Kafka unreachable: /healthz answers 503 from the start.
    down = subprocess.Popen([BIN, "--kafka.bootstrap.servers=127.0.0.1:1", "--grpc.listen=",
                             f"--http.listen=127.0.0.1:{dead_http}",
                             f"--http.health_listen=127.0.0.1:{dead_health}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"KSIDECAR_KAFKA_BOOTSTRAP_SERVERS": "elsewhere:9092"}
    try:
        deadline = time.time() + 30
        while True:
            r = run(["--healthcheck"],
                    env={**env, "KSIDECAR_HTTP_HEALTH_LISTEN": f"0.0.0.0:{health}"})
            if r.returncode == 0 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 0 and json.loads(r.stdout) == {"status": "ok"}, (r.stdout, r.stderr)
        r = run(["--healthcheck", f"--http.listen=127.0.0.1:{http}"], env=env)
        assert r.returncode == 0, r.stderr  # no probe listener: http.listen
        r = run(["--healthcheck", f"--http.health_listen=127.0.0.1:{dead_health}"], env=env)
        assert r.returncode == 1 and "answered 503" in r.stderr, (r.stdout, r.stderr)
        assert json.loads(r.stdout)["status"] == "NOT_SERVING"
        r = run(["--healthcheck", f"--http.health_listen=127.0.0.1:{free_port()}"], env=env)
        assert r.returncode == 1 and "--healthcheck" in r.stderr, r.stderr
        r = run(["--healthcheck", "--http.listen=", "--http.health_listen="], env=env)
        assert r.returncode == 1 and "http.health_listen" in r.stderr, r.stderr
        r = run(["--healthcheck", "--no.such.key=1"], env=env)
        assert r.returncode == 1 and "no.such.key" in r.stderr, r.stderr
    finally:
        for p in (up, down):
            p.send_signal(signal.SIGTERM)
            assert p.wait(60) == 0
