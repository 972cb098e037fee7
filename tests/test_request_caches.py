"""What keeps a flood of requests from becoming a flood of queries: unknown paths share rate-limited route-table
reads, and `?since=` lookups are shared and kept. The route table reads the real Postgres; the `?since=` cache is
tested with the broker call isolated (the test broker answers every time lookup with offset 0)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection

from bindings.services import do_put_route
from streams.cache import Cache
from streams.routes import OpenStreams, RouteTable
from streams.starts import StartFinder
from tests.conftest import unique

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.asyncio
async def test_unknown_paths_share_one_route_table_read_per_gap_and_a_new_route_is_still_found(
    settings: Any,
) -> None:
    settings.SSE_UNKNOWN_PATH_RELOAD_MS = 400
    loop = asyncio.get_running_loop()
    # One thread for the table's queries, so the test can close its database connection at the end.
    database_thread = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(database_thread)
    try:
        table = RouteTable(OpenStreams())
        await table.candidates("/warm-up-" + unique("p"))  # the first read (the table answers for this request)

        # Fifty misses: the first reads at once; the others arrived after that read began, so they wait for the
        # next one, a gap later, and share it. Nobody is answered from a read that began before it arrived. Fifty
        # more right after: the gap has not passed, so all of them wait for one read.
        for reads in (2, 1):
            before, started = table.reloads, loop.time()
            found = await asyncio.gather(*(table.candidates(f"/{unique('nothing')}") for _ in range(50)))
            assert found == [[]] * 50
            assert table.reloads - before == reads
            assert loop.time() - started >= 0.35

        # A route committed now is found by the next request, though the gap has not passed: it waits for a read.
        name = unique("fresh")
        await asyncio.to_thread(do_put_route, name=name, path=f"/{name}", topic="t")
        matched = await table.candidates(f"/{name}")
        assert [m.route.name for m in matched] == [name]
    finally:
        await loop.run_in_executor(None, lambda: connection.close())  # noqa: PLW0108  (resolved in that thread)
        database_thread.shutdown()


class CountingMetadata:
    """Kafka's answer to a time lookup, counted."""

    def __init__(self, answer: dict[int, int]) -> None:
        self.answer, self.calls = answer, 0

    async def offsets_for_time(self, topic: str, partitions: list[int], epoch_ms: int) -> dict[int, int]:
        self.calls += 1
        await asyncio.sleep(0.01)
        return dict(self.answer)


def finder(metadata: CountingMetadata) -> tuple[StartFinder, Any]:
    state = SimpleNamespace(name="topic", info=SimpleNamespace(partitions=[0, 1]))
    return StartFinder(metadata, Cache(1 << 20), asyncio.get_running_loop()), state  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_since_lookups_are_shared_and_kept_for_the_setting(settings: Any) -> None:
    settings.SSE_SINCE_CACHE_S = 1
    metadata = CountingMetadata({0: 5, 1: 7})
    starts, state = finder(metadata)
    answers = await asyncio.gather(*(starts._offsets_for_time(state, 1000) for _ in range(20)))
    assert answers == [{0: 5, 1: 7}] * 20
    assert metadata.calls == 1  # twenty streams asking together: one lookup
    await starts._offsets_for_time(state, 1000)
    assert metadata.calls == 1  # kept
    await starts._offsets_for_time(state, 2000)
    assert metadata.calls == 2  # another time, another lookup
    await asyncio.sleep(1.1)
    await starts._offsets_for_time(state, 1000)
    assert metadata.calls == 3  # older than SSE_SINCE_CACHE_S: asked again


@pytest.mark.asyncio
async def test_a_since_answer_of_no_record_yet_or_a_failure_is_not_kept(settings: Any) -> None:
    settings.SSE_SINCE_CACHE_S = 60
    metadata = CountingMetadata({0: 5, 1: -1})  # partition 1 has no record at that time yet: one may come
    starts, state = finder(metadata)
    await starts._offsets_for_time(state, 1000)
    await starts._offsets_for_time(state, 1000)
    assert metadata.calls == 2

    failing = CountingMetadata({})

    async def unreachable(*_: object) -> dict[int, int]:
        failing.calls += 1
        raise RuntimeError("broker down")

    failing.offsets_for_time = unreachable  # type: ignore[method-assign,assignment]
    starts, state = finder(failing)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await starts._offsets_for_time(state, 1000)
    assert failing.calls == 2
