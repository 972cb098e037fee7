"""Listening to a Channels layer group for as long as the process lives.

channels_redis forgets a group member `group_expiry` seconds (a day by default) after it joined, so a listener
joins again every `REJOIN_S`; after a failure it leaves the group with its old channel before joining with a new
one, so nothing keeps piling messages on a channel no one reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

REJOIN_S = 3600.0
RETRY_S = 5.0


async def listen(
    group: str,
    handle: Callable[[dict[str, Any]], Awaitable[None]],
    *,
    on_error: Callable[[], None] | None = None,
    on_rejoin: Callable[[], None] | None = None,
) -> None:
    """Call `handle` with every message sent to `group`, until cancelled. `on_error` runs when the layer fails
    (messages may have been missed meanwhile), `on_rejoin` once the group is joined again after a failure (to
    catch up on what was missed)."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = asyncio.get_running_loop()
    failed = False
    while True:
        channel = None
        try:
            channel = await layer.new_channel()
            await layer.group_add(group, channel)
            joined = loop.time()
            if failed and on_rejoin is not None:
                on_rejoin()
            failed = False
            while True:
                if loop.time() - joined > REJOIN_S:
                    await layer.group_add(group, channel)
                    joined = loop.time()
                try:
                    message = await asyncio.wait_for(layer.receive(channel), REJOIN_S / 2)
                except (TimeoutError, RedisTimeoutError):
                    continue  # a quiet spell; the group still holds us (rejoined above when due)
                await handle(message)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the channel layer group %s cannot be heard; retrying", group, exc_info=True)
            failed = True
            if on_error is not None:
                on_error()
            if channel is not None:
                with contextlib.suppress(Exception):
                    await layer.group_discard(group, channel)
            await asyncio.sleep(RETRY_S)
