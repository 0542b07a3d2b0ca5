"""A partition over its commit-metadata budget keeps moving (issue 10 part 1): out-of-order
acks, key ordering and random kill -9 of ksidecar, until every record is acked."""
import pathlib
import random
import signal
import time

from conftest import create_topic, describe_group, produce, unique, wait_for, watermarks
from slow_acker import SlowAcker

N = 100_000
KILLS = 5
STALL_S = 20  # liveness bound, not a speed check


def test_out_of_order_acks_and_kill_9_never_stall_a_held_back_partition(bootstrap, sidecars):
    topic, g = unique("tstall"), unique("gstall")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, N, keys=97)
    # 512 bytes: the acks above the commit point do not fit, so the partition is held back.
    args = ["--subscriber.max_records=5000", "--commit.metadata_max_bytes=512"]
    rnd = random.Random(10)
    client = SlowAcker(g, topic, seed=11)
    procs = [sidecars(args)]
    # Kill points spread over the run by progress (it is fast now, so time would not do).
    kill_at = sorted(rnd.sample(range(N // 20, N * 17 // 20), KILLS))
    kills, first = 0, None
    t0 = time.time()
    while len(client.acked) < N:
        sc = procs[-1]
        if client.step(sc) and first is None:
            first = time.time()
        if client.gap_now() > STALL_S:
            st, status = sc.get(f"/v1/groups/{g}")
            raise AssertionError(f"no record delivered for {client.gap_now():.1f} s; "
                                 f"{len(client.acked)} of {N} acked; status {status}\n"
                                 f"{sc.logs()[-3000:]}")
        if kills < KILLS and first is not None and len(client.acked) >= kill_at[kills]:
            sc.stop(sig=signal.SIGKILL)
            kills += 1
            print(f"kill -9 #{kills} at {time.time() - t0:.1f} s, "
                  f"{len(client.acked)} acked")
            client.restarted()
            procs.append(sidecars(args))
            first = None
    elapsed = time.time() - t0
    ends = watermarks(bootstrap, topic)
    assert ends == {0: N}
    # Committed offset == end offset, read from the broker by Kafka's own tool.
    wait_for(lambda: describe_group(bootstrap, g, topic).get(0, (None,))[0] == N, 60, 1,
             "the committed offset to reach the end")
    lost = N - len(client.acked)
    logs = "".join(pathlib.Path(p.log_path).read_text(errors="replace") for p in procs)
    truncations = logs.count("commit metadata exceeds 512 bytes")
    print(f"{N} records, {kills} kill -9, {elapsed:.1f} s, {client.deliveries} deliveries "
          f"({client.deliveries - N} duplicates), lost {lost}, longest gap without a delivery "
          f"{client.max_gap:.1f} s, {truncations} truncation warnings, "
          f"{logs.count('held back for')} held-back warnings")
    assert kills == KILLS
    assert lost == 0
    assert truncations > 0, "the metadata never overflowed: the test did not test holding back"
    assert client.max_gap < STALL_S
    assert procs[-1].stop() == 0

