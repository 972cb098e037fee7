"""The route table of a web process: compiled once, rebuilt when the configuration changes.

A listener on the Channels layer hears every committed change (bindings/changes.py) and marks the table stale;
it is then rebuilt on the next request, one query however many requests wait. A path no route matches also
triggers a rebuild before the 404, unless the table was read after the request arrived, so a route created a
moment ago is never refused because its announcement is still on its way. Those rebuilds happen at most every
`SSE_UNKNOWN_PATH_RELOAD_MS`: a flood of unknown paths waits for the next one and shares it, instead of sending
a query each to the database. The table is also rebuilt every
`MAX_AGE_S` regardless, in case an announcement was lost.

An announcement also rebuilds the table at once, and each rebuild closes the open streams whose route was
removed or changed what it delivers or who may have it (`RouteSpec.delivery`): their clients reconnect and
resume under the new configuration. Every other stream continues untouched.

Each rebuild also reads the catalogs and the topics' key/value models (`load_models`), the one place the data
plane gets them from: when they changed, `on_models` hands them to the hub, whose consumer processes decode
records with them (streams/kafka/decoding.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from bindings.changes import CHANGES_GROUP
from bindings.selectors import GuardSpec, RouteSpec, catalog_specs, route_specs, topic_model_specs
from streams.codecs.schemas import Limits
from streams.kafka.decoding import Budgets, Models
from streams.routes.listen import listen
from streams.routes.matching import CompiledRoute, Match, compile_routes, match_all, path_segments

log = logging.getLogger(__name__)

MAX_AGE_S = 30.0
DATABASE_RETRY_S = 1.0


def load_models() -> Models:
    """The catalogs and topic models records are decoded with (docs/schemas.md), as the control plane keeps them,
    with the bounds of the settings `DECODE_*`."""
    limits = Limits(settings.DECODE_MAX_BYTES, settings.DECODE_MAX_ITEMS, settings.DECODE_MAX_DEPTH)
    budgets = Budgets(settings.DECODE_BUDGET_MS, settings.DECODE_MEMORY_MB)
    return Models.of(catalog_specs(), topic_model_specs(), limits, budgets)


def _load() -> tuple[tuple[RouteSpec, ...], Models]:
    close_old_connections()
    return route_specs(), load_models()


class OpenStream(Protocol):
    """What `OpenStreams` knows of a stream: how to end it when its route changed."""

    def route_changed(self) -> None: ...


class OpenStreams:
    """The open streams of this process by route, with their path and what their route delivered when they
    opened."""

    def __init__(self) -> None:
        # Each stream's path as it came (its stream holds the same string): split into segments only when the routes
        # change, not kept split for as long as the stream is open. The delivery is the route's own (`RouteSpec`
        # makes it once), shared by its streams.
        self.by_route: dict[str, dict[OpenStream, tuple[tuple[object, ...], str]]] = {}
        self.closed = 0

    def add(self, stream: OpenStream, route: RouteSpec, path: str) -> None:
        self.by_route.setdefault(route.name, {})[stream] = (route.delivery(), path)

    def remove(self, stream: OpenStream, route: RouteSpec) -> None:
        streams = self.by_route.get(route.name)
        if streams is not None:
            streams.pop(stream, None)
            if not streams:
                del self.by_route[route.name]

    def reconcile(self, current: dict[str, tuple[CompiledRoute, tuple[object, ...]]]) -> None:
        """Close the streams whose route is gone, delivers otherwise now, or no longer matches their path;
        `current` maps each route's name to it and its delivery."""
        for name, streams in list(self.by_route.items()):
            route, now = current.get(name, (None, None))
            for stream, (delivery, path) in list(streams.items()):
                if route is None or delivery != now or route.match(path_segments(path)) is None:
                    self.closed += 1
                    stream.route_changed()


class RouteTable:
    def __init__(self, open_streams: OpenStreams) -> None:
        """`open_streams`: the process's streams, closed when a rebuild finds their route changed."""
        self.open_streams = open_streams
        self.routes: tuple[CompiledRoute, ...] = ()
        self.by_name: dict[str, tuple[CompiledRoute, tuple[object, ...]]] = {}  # name -> route, its delivery
        self.loaded_at = float("-inf")
        self.stale = True
        self.reloads = 0
        self._loading: asyncio.Task[None] | None = None
        self._loading_since = float("-inf")
        self._listener: asyncio.Task[None] | None = None
        self._eager: set[asyncio.Task[None]] = set()
        self._miss_reload_at = float("-inf")  # when a path no route matched last read the table
        self.models = Models()  # the catalogs and topic models, read with the routes
        self.on_models: Callable[[Models], None] = lambda models: None
        self._failed_at = float("-inf")  # when a read last failed

    async def match(self, path: str) -> Match | None:
        """The first route matching `path`."""
        found = await self.candidates(path)
        return found[0] if found else None

    async def candidates(self, path: str) -> list[Match]:
        """Every route matching `path`, in order (the first whose guards authorise serves). While the database
        cannot be read, the last table read answers (DatabaseError only when there is none)."""
        asked = asyncio.get_running_loop().time()
        if (self.stale or asked - self.loaded_at > MAX_AGE_S) and self._may_read(asked):
            await self._read(self.reload(not_before=asked))
        found = match_all(self.routes, path)
        if not found and self.loaded_at < asked and self._may_read(asked):
            # Maybe a route committed a moment ago, its announcement still on its way: a table read after this
            # request arrived has every route committed before it.
            await self._read(self._reload_after_miss(asked))
            found = match_all(self.routes, path)
        return found

    def _may_read(self, now: float) -> bool:
        """No read within DATABASE_RETRY_S of a failed one: meanwhile the last table answers at once."""
        return self.loaded_at == float("-inf") or now - self._failed_at >= DATABASE_RETRY_S

    async def _read(self, reading: Coroutine[Any, Any, None]) -> None:
        try:
            await reading
        except DatabaseError:
            log.warning("route table: the database cannot be read; the last table answers", exc_info=True)
            if self.loaded_at == float("-inf"):
                raise  # no table yet: nothing to answer with
            self._failed_at = asyncio.get_running_loop().time()

    async def _reload_after_miss(self, asked: float) -> None:
        """A table read after `asked`, at most one per SSE_UNKNOWN_PATH_RELOAD_MS for unknown paths: requests
        that miss meanwhile wait for the next read and share it."""
        loop = asyncio.get_running_loop()
        wait = self._miss_reload_at + settings.SSE_UNKNOWN_PATH_RELOAD_MS / 1000 - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
            if self.loaded_at >= asked:  # another request's read, started after this one arrived, answers it
                return
        self._miss_reload_at = loop.time()
        await self.reload(not_before=asked)

    async def reload(self, *, not_before: float) -> None:
        """Rebuild from the database, with a query started at `not_before` or later; concurrent callers share
        one."""
        loop = asyncio.get_running_loop()
        if self._listener is None:
            self._listener = loop.create_task(self._listen(), name="route-table-listener")
        while True:
            task = self._loading
            if task is not None and self._loading_since >= not_before:
                await asyncio.shield(task)  # in flight or done, and recent enough
                return
            if task is not None and not task.done():
                with contextlib.suppress(Exception):  # its failure is its callers' to see
                    await asyncio.shield(task)  # an older query: let it finish, then read again
                continue
            self._loading_since = loop.time()
            self._loading = loop.create_task(self._reload(self._loading_since))

    async def _reload(self, started: float) -> None:
        self.stale = False  # a change announced while loading marks it stale again
        try:
            specs, models = await sync_to_async(_load, thread_sensitive=False)()
        except BaseException:
            self.stale = True
            raise
        if models != self.models:
            self.models = models
            self.on_models(models)
        self.routes = compile_routes(specs)
        self.by_name = {route.spec.name: (route, route.spec.delivery()) for route in self.routes}
        self.loaded_at = started
        self.reloads += 1
        self.open_streams.reconcile(self.by_name)

    def _reload_soon(self) -> None:
        """After an announcement: rebuild now, so streams of a changed route close within moments."""
        loop = asyncio.get_running_loop()

        async def reload() -> None:
            try:
                await self.reload(not_before=loop.time())
            except Exception:
                log.warning("route table reload failed; retried on the next request", exc_info=True)

        # reload() folds concurrent callers into one query; keep a reference so the task is not collected.
        task = loop.create_task(reload(), name="route-table-reload")
        self._eager.add(task)
        task.add_done_callback(self._eager.discard)

    async def _listen(self) -> None:
        async def changed(message: dict[str, object]) -> None:
            if message.get("kind") == "revocation":  # no route changed (streams/access/revocations.py hears it)
                return
            self.stale = True
            self._reload_soon()

        def missed() -> None:
            self.stale = True

        # Back after an outage of the layer: read the table now, so that streams of a route changed meanwhile
        # close without waiting for a request to notice the table is stale.
        await listen(CHANGES_GROUP, changed, on_error=missed, on_rejoin=self._reload_soon)

    def guards(self) -> set[GuardSpec]:
        """The guards the routes of the table use."""
        return {guard for route in self.routes for guard, _ in route.spec.guarded}

    def changed_since(self, route: RouteSpec, path: str) -> bool:
        """Whether the table now holds another version of `route` (or none, or one that no longer matches
        `path`): for a stream that was set up while a reload ran, which that reload's reconcile could not see."""
        compiled, delivery = self.by_name.get(route.name, (None, None))
        if compiled is not None and compiled.spec is route:
            return False  # the very version the stream was set up with (the usual case, and the cheapest check)
        return compiled is None or delivery != route.delivery() or compiled.match(path_segments(path)) is None
