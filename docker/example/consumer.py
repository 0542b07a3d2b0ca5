"""The example service of compose.yaml: produces a few records through ksidecar, then
consumes them with long-poll fetches and acks each batch. Standard library only."""
import json
import os
import time
import urllib.error
import urllib.request

URL = os.environ.get("KSIDECAR_URL", "http://127.0.0.1:8080")
TOPIC = os.environ.get("EXAMPLE_TOPIC", "orders")
GROUP = os.environ.get("EXAMPLE_GROUP", "example-service")
COUNT = int(os.environ.get("EXAMPLE_RECORDS", "10"))
ONCE = os.environ.get("EXAMPLE_ONCE") == "1"  # stop once COUNT records are acked


def call(method, path, body=None, timeout=70):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def wait_ready():
    while True:
        try:
            call("GET", "/readyz", timeout=5)
            return
        except (urllib.error.URLError, OSError) as e:
            print("waiting for ksidecar:", e)
            time.sleep(2)


def main():
    wait_ready()
    records = [{"key": f"order-{i}", "value": json.dumps({"id": i})} for i in range(COUNT)]
    for res in call("POST", f"/v1/topics/{TOPIC}/records", {"records": records})["results"]:
        if "error" in res:
            print("produce refused:", res["error"])
    acked = 0
    while not ONCE or acked < COUNT:
        batch = call("GET", f"/v1/groups/{GROUP}/records?topic={TOPIC}&max=100&wait_ms=30000")
        ids = []
        for rec in batch["records"]:
            print(f"{rec['topic']}[{rec['partition']}]@{rec['offset']} {rec.get('key')}: "
                  f"{rec.get('value')}")
            ids.append(rec["ack_id"])
        if ids:
            call("POST", f"/v1/groups/{GROUP}/acks", {"ack_ids": ids})
            acked += len(ids)
    print(f"acked {acked} records")


if __name__ == "__main__":
    main()
