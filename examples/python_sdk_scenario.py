"""A short scenario through Apache Iggy's Python SDK (`apache-iggy` on PyPI,
a binding of the Rust SDK), over TCP, against a running sluice.

    python3 -m venv /tmp/pyiggy && /tmp/pyiggy/bin/pip install apache-iggy==0.9.0
    sluice server --with-default-root-credentials &
    /tmp/pyiggy/bin/python examples/python_sdk_scenario.py [127.0.0.1:8090]

Each step prints what it checked; the first difference raises and the script
exits non-zero. It creates and deletes its own stream (`py-scenario`); on an
empty server that stream gets id 0, as in Iggy 0.11.
"""

import asyncio
import sys

from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

STREAM = "py-scenario"
TOPIC = "events"


async def poll(client, strategy, count, auto_commit):
    """Partition 0 as consumer 1."""
    return await client.poll_messages(
        STREAM,
        TOPIC,
        consumer=Consumer.Single(1),
        polling_strategy=strategy,
        count=count,
        auto_commit=auto_commit,
        partition_id=0,
    )


def check(what, got, want):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")
    print(f"ok  {what}: {got!r}")


async def main(address):
    client = IggyClient(address)
    await client.connect()
    await client.ping()
    await client.login_user("iggy", "iggy")
    print("ok  connect, ping, login")

    if await client.get_stream(STREAM) is not None:
        await client.delete_stream(STREAM)
    await client.create_stream(STREAM)
    stream = await client.get_stream(STREAM)
    by_id = await client.get_stream(stream.id)
    check("the stream by its numeric id", by_id.name, STREAM)
    await client.create_topic(STREAM, TOPIC, partitions_count=2)
    topic = await client.get_topic(STREAM, TOPIC)
    check("topic partitions", topic.partitions_count, 2)

    await client.send_messages(
        STREAM, TOPIC, 0, [SendMessage(f"m{i}") for i in range(5)]
    )
    print("ok  send 5 to partition 0")

    first = await poll(client, PollingStrategy.Next(), 3, True)
    check("next, auto-commit: offsets", [m.offset() for m in first], [0, 1, 2])
    check("payloads", [m.payload() for m in first], [b"m0", b"m1", b"m2"])
    rest = await poll(client, PollingStrategy.Next(), 10, True)
    check("next resumes after the committed offset", [m.offset() for m in rest], [3, 4])
    by_offset = await poll(client, PollingStrategy.Offset(4), 10, False)
    check("offset 4", [m.payload() for m in by_offset], [b"m4"])

    await client.create_consumer_group(STREAM, TOPIC, "billing")
    groups = await client.get_consumer_groups(STREAM, TOPIC)
    check("consumer groups", [(g.id, g.name) for g in groups], [(0, "billing")])

    await client.purge_topic(STREAM, TOPIC)
    after = await poll(client, PollingStrategy.First(), 10, False)
    check("after purge, first", after, [])
    await client.send_messages(STREAM, TOPIC, 0, [SendMessage("fresh")])
    fresh = await poll(client, PollingStrategy.Next(), 10, True)
    check(
        "after purge, next returns the fresh history",
        [(m.offset(), m.payload()) for m in fresh],
        [(0, b"fresh")],
    )

    stats = await client.get_stats()
    print(f"ok  stats: {stats.streams_count} stream(s), {stats.messages_count} message(s)")
    await client.delete_stream(STREAM)
    check("stream deleted", await client.get_stream(STREAM), None)
    print("scenario passed")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8090"))
