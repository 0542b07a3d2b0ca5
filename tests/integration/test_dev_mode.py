"""The README's first quick-start command: dev mode, then its own curl lines, run for real."""
import json
import os
import re
import signal
import subprocess
import time

from conftest import ROOT, free_port


def quick_start_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", section, re.S)
    return [line.strip() for b in blocks for line in b.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_readme_has_exactly_two_quick_start_commands():
    cmds = quick_start_commands()
    assert len(cmds) == 2, cmds
    assert "scripts/test.sh" in cmds[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert cmds[1] in ci, ".ci/run must run the README's test command"


def test_dev_mode_fetch_and_ack_with_the_printed_curl_lines():
    cmd = quick_start_commands()[0]
    port = free_port()
    env = {**os.environ, "KSIDECAR_HTTP_LISTEN": f"127.0.0.1:{port}"}
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        curls = []
        deadline = time.time() + 300  # the command may build first
        while len(curls) < 3 and time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"dev mode exited early with {proc.wait()}")
            if line.strip().startswith("curl "):
                curls.append(line.strip())
        fetch_cmd, stream_cmd, ack_cmd = curls
        assert f":{port}/" in fetch_cmd and "/records?" in fetch_cmd
        assert f":{port}/" in stream_cmd and "/stream?" in stream_cmd and "-N" in stream_cmd
        assert "/acks" in ack_cmd and "ACK_ID" in ack_cmd

        records = []
        deadline = time.time() + 60
        while not records and time.time() < deadline:
            out = subprocess.run(["bash", "-c", fetch_cmd], capture_output=True, text=True,
                                 timeout=60, check=True)
            records = json.loads(out.stdout)["records"]
        assert records, "dev mode served no record within 60 s"
        r = records[0]
        assert r["topic"] == "demo" and r["value_encoding"] == "text"
        assert json.loads(r["value"])["event"] == "page_view"

        out = subprocess.run(["bash", "-c", ack_cmd.replace("ACK_ID", r["ack_id"])],
                             capture_output=True, text=True, timeout=30, check=True)
        res = json.loads(out.stdout)
        assert res["acked"] == 1 and res["results"][0]["status"] == "OK", res

        # The stream line: records come as lines, and the ack line acks one of them while
        # the stream is open.
        curl = subprocess.Popen(["bash", "-c", f"exec {stream_cmd}"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            rec = None
            while rec is None:
                line = curl.stdout.readline()
                assert line, "the stream ended before a record"
                if line.strip() and "ack_id" in json.loads(line):
                    rec = json.loads(line)
            assert rec["topic"] == "demo"
            out = subprocess.run(["bash", "-c", ack_cmd.replace("ACK_ID", rec["ack_id"])],
                                 capture_output=True, text=True, timeout=30, check=True)
            res = json.loads(out.stdout)
            assert res["acked"] == 1 and res["results"][0]["status"] == "OK", res
        finally:
            curl.kill()
            curl.wait()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=30)
    assert rc == 0
