"""The README's example: publish three records, then read, ack and close.

    python demo.py [TARGET] (default 127.0.0.1:50051, as `scripts/dev.sh` serves it)"""
import logging
import sys

import ksidecar

logging.basicConfig(level=logging.WARNING)  # the library logs STALE acks and reconnects
target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"

with ksidecar.Publisher(target) as pub:
    for user in ("alice", "bob", "carol"):
        r = pub.publish("demo-py", f'{{"user":"{user}"}}', key=user, headers=[("source", "demo.py")])
        print(f"produced {user} to partition {r.partition} at offset {r.offset}")

# Iterator form; subscribe(callback, workers=N) is the callback form, ksidecar.aio the asyncio one.
with ksidecar.Subscriber(target, "demo-py-group", ["demo-py"], max_messages=100,
                         deadline_ms=30000) as sub:
    results = []
    for msg in sub:
        print(f"{msg.topic}[{msg.partition}]@{msg.offset} key={msg.key.decode()} "
              f"value={msg.value.decode()} headers={msg.headers} attempt={msg.attempt}")
        results.append(msg.ack_with_result())  # or msg.ack(): same batching, no future
        if len(results) == 3:
            break
    for f in results:
        print("ack:", f.result(timeout=10))
    print("close: every ack answered:", sub.close(timeout=10))
