"""The asyncio Subscriber (grpc.aio): async iteration and the callback form deliver and
commit every record; ack futures are awaitable; a bad target is a ConnectError."""
import asyncio

import pytest

import ksidecar
import ksidecar.aio
from conftest import ic, unique, wait_committed_end


def test_async_iteration_acks_everything(bootstrap, sidecars, topic):
    t = topic(4, 2000)
    sc = sidecars()
    g = unique("g")

    async def main():
        seen = set()
        async with ksidecar.aio.Subscriber(f"127.0.0.1:{sc.grpc_port}", g, [t]) as sub:
            last = None
            async for m in sub:
                seen.add((m.partition, m.offset))
                if len(seen) == 2000:
                    last = await m.ack_with_result()
                    break
                m.ack()
            ok = await sub.close()
        return seen, last, ok

    seen, last, ok = asyncio.run(main())
    assert len(seen) == 2000 and last.status == ksidecar.AckStatus.ACCEPTED and ok is True
    wait_committed_end(bootstrap, g, t, 4)


def test_async_callback_form(bootstrap, sidecars, topic):
    t = topic(2, 300)
    sc = sidecars()
    g = unique("g")

    async def main():
        sub = ksidecar.aio.Subscriber(f"127.0.0.1:{sc.grpc_port}", g, [t], max_messages=50)
        seen = set()

        async def handle(m):
            await asyncio.sleep(0.001)
            seen.add(m.offset + 1000 * m.partition)
            assert sub.outstanding <= 50
            m.ack()
            if len(seen) == 300:
                asyncio.ensure_future(sub.close())

        await sub.start()
        ok = await asyncio.wait_for(sub.run(handle, concurrency=20), 60)
        return seen, ok

    seen, ok = asyncio.run(main())
    assert len(seen) == 300 and ok is True
    wait_committed_end(bootstrap, g, t, 2)


def test_async_bad_target():
    async def main():
        await ksidecar.aio.Subscriber(f"127.0.0.1:{ic.free_port()}", "g", ["t"],
                                      connect_timeout_s=2).start()

    with pytest.raises(ksidecar.ConnectError) as ei:
        asyncio.run(main())
    print(ei.value)
