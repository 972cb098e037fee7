"""The route table of a web process: compiled once, rebuilt when the configuration changes.

A listener on the Channels layer hears every committed change (bindings/changes.py) and marks the table stale;
it is then rebuilt on the next request, one query however many requests wait. A path no route matches also
triggers a rebuild before the 404 (at most every `MISS_RELOAD_S`), so a route created a moment ago is never
refused because its announcement is still on its way; and the table is rebuilt every `MAX_AGE_S` regardless,
in case an announcement was lost.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections

from bindings.changes import CHANGES_GROUP
from bindings.selectors import RouteSpec, route_specs
from streams.routing import CompiledRoute, Match, compile_routes, match_path

log = logging.getLogger(__name__)

MAX_AGE_S = 30.0
MISS_RELOAD_S = 0.2
LISTEN_RETRY_S = 5.0


def _load() -> tuple[RouteSpec, ...]:
    close_old_connections()
    return route_specs()


class RouteTable:
    def __init__(self) -> None:
        self.routes: tuple[CompiledRoute, ...] = ()
        self.loaded_at = float("-inf")
        self.stale = True
        self.reloads = 0
        self._loading: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None

    async def match(self, path: str) -> Match | None:
        now = asyncio.get_running_loop().time()
        if self.stale or now - self.loaded_at > MAX_AGE_S:
            await self.reload()
        found = match_path(self.routes, path)
        if found is None and asyncio.get_running_loop().time() - self.loaded_at > MISS_RELOAD_S:
            await self.reload()
            found = match_path(self.routes, path)
        return found

    async def reload(self) -> None:
        """Rebuild from the database; concurrent callers share one query."""
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="route-table-listener")
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._reload())
        task = self._loading
        try:
            await asyncio.shield(task)
        finally:
            if self._loading is task and task.done():
                self._loading = None

    async def _reload(self) -> None:
        self.stale = False  # a change announced while loading marks it stale again
        started = asyncio.get_running_loop().time()
        try:
            self.routes = compile_routes(await sync_to_async(_load, thread_sensitive=False)())
        except BaseException:
            self.stale = True
            raise
        self.loaded_at = started
        self.reloads += 1

    async def _listen(self) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        while True:
            try:
                channel = await layer.new_channel()
                await layer.group_add(CHANGES_GROUP, channel)
                while True:
                    try:
                        await layer.receive(channel)
                    except TimeoutError:
                        continue  # a quiet spell: the Redis client's read timed out, the group still holds us
                    self.stale = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("route changes cannot be heard; retrying", exc_info=True)
                self.stale = True
                await asyncio.sleep(LISTEN_RETRY_S)


route_table = RouteTable()
