"""When a topic's fan-out writes: at once after a quiet spell, at the end of the coalescing window on a busy topic,
and, when the last fan-out held the loop long (many clients), no sooner than twice as long after it began, so
the loop keeps half its time for the rest (opens in a reconnect storm, other topics) and each write carries more
events (streams/hub/hub.py, `FanOut`); while many streams are opening (a storm), no sooner than eight times as
long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Any

from streams.hub.hub import FANOUT_SHARE_FACTOR, FANOUT_STORM_FACTOR, FanOut
from streams.hub.topic_state import TopicState
from streams.kafka.client import TopicInfo

COALESCE_S = 0.02


class Client:
    """A subscriber that takes `cost_s` of the loop's time each time it is notified."""

    def __init__(self, cost_s: float = 0.0) -> None:
        self.cost_s = cost_s
        self.notified = 0

    def share_key(self) -> Hashable | None:
        return None

    def notify(self) -> bytes | None:
        self.notified += 1
        if self.cost_s:
            time.sleep(self.cost_s)  # a fan-out to many clients, in one
        return None

    def account(self, clients: int) -> None:
        pass

    def share(self, followers: list[Any], data: bytes) -> None:
        pass


def topic(*clients: Client) -> TopicState:
    state = TopicState("t", TopicInfo(partitions=[0], compacted=False), 0.0)
    state.subscribers.update(clients)  # type: ignore[arg-type]
    return state


def test_a_quiet_topic_fans_out_at_once_and_a_busy_one_at_the_window_end() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fanout, client = FanOut(loop, COALESCE_S), Client()
        state = topic(client)
        fanout.schedule(state)
        assert client.notified == 1
        assert state.fanout is None
        fanout.schedule(state)  # within the window: later, once
        fanout.schedule(state)
        assert client.notified == 1
        assert state.fanout is not None
        assert abs(state.fanout.when() - (state.last_fanout + COALESCE_S)) < 1e-6
        await asyncio.sleep(COALESCE_S * 3)
        assert client.notified == 2

    asyncio.run(scenario())


def test_a_fan_out_that_held_the_loop_long_waits_twice_its_cost_before_the_next() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fanout, slow = FanOut(loop, COALESCE_S), Client(cost_s=0.05)
        state = topic(slow)
        fanout.schedule(state)
        assert state.fanout_cost >= 0.05
        fanout.schedule(state)  # records arrived meanwhile
        assert state.fanout is not None
        wanted = state.last_fanout + FANOUT_SHARE_FACTOR * state.fanout_cost
        assert wanted > state.last_fanout + COALESCE_S
        assert abs(state.fanout.when() - wanted) < 1e-6
        state.fanout.cancel()

    asyncio.run(scenario())


def test_a_cheap_fan_out_keeps_the_coalescing_window() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fanout = FanOut(loop, COALESCE_S)
        state = topic(Client())
        fanout.schedule(state)
        assert state.fanout_cost < COALESCE_S / FANOUT_SHARE_FACTOR
        fanout.schedule(state)
        assert state.fanout is not None
        assert abs(state.fanout.when() - (state.last_fanout + COALESCE_S)) < 1e-6
        state.fanout.cancel()

    asyncio.run(scenario())


def test_while_many_streams_are_opening_a_long_fan_out_waits_eight_times_its_cost() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fanout, slow = FanOut(loop, COALESCE_S), Client(cost_s=0.05)
        waiting = [True]
        fanout.opens_waiting = lambda: waiting[0]
        state = topic(slow)
        fanout.schedule(state)
        fanout.schedule(state)  # records arrived meanwhile, many streams are opening
        assert state.fanout is not None
        assert abs(state.fanout.when() - (state.last_fanout + FANOUT_STORM_FACTOR * state.fanout_cost)) < 1e-6
        state.fanout.cancel()
        state.fanout = None
        waiting[0] = False  # the storm is over: half the loop again
        fanout.schedule(state)
        assert state.fanout is not None
        assert abs(state.fanout.when() - (state.last_fanout + FANOUT_SHARE_FACTOR * state.fanout_cost)) < 1e-6
        state.fanout.cancel()

    asyncio.run(scenario())
