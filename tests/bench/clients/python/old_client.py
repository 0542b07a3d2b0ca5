"""The issue-13 baseline: the 110-line Python client the project had before the library
(clients/python/ksidecar_client.py at a1788e8, read from git history, never installed),
consuming N records with one ack message per record (as its README showed), or per BATCH
records. Prints the rate from the first record to the last; asserts nothing.

    python old_client.py TARGET GROUP TOPIC N [BATCH]     (needs grpcio-tools; a git checkout)
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[4]
OLD = "a1788e8:clients/python/ksidecar_client.py"


def main():
    target, group, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    src = subprocess.run(["git", "-C", str(ROOT), "show", OLD], check=True,
                         capture_output=True).stdout
    d = tempfile.mkdtemp(prefix="ksidecar-old-client-")
    pathlib.Path(d, "ksidecar_client.py").write_bytes(src)
    sys.path.insert(0, d)
    os.environ.setdefault("KSIDECAR_PROTO_DIR", str(ROOT / "proto"))
    from ksidecar_client import Subscriber  # noqa: E402 (generated stubs at import)

    seen, pend, t0 = set(), [], None
    with Subscriber(target, group, [topic]) as sub:
        for rec in sub.records():
            if t0 is None:
                t0 = time.monotonic()
            seen.add((rec.partition, rec.offset))
            pend.append(rec)
            if len(pend) >= batch:
                sub.ack(*pend)
                pend = []
            if len(seen) >= n:
                break
        if pend:
            sub.ack(*pend)
        t1 = time.monotonic()
        time.sleep(2)  # let the last acks go out before the stream is cancelled
    print(f"old client, ack every {batch} record(s): {len(seen)} distinct records in "
          f"{t1 - t0:.2f} s = {len(seen) / (t1 - t0):,.0f} rec/s")


if __name__ == "__main__":
    main()
