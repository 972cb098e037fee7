"""Change events: every committed change to the configuration is announced to every web process.

`bindings.services` calls `announce_after_commit` for each write; the announcement goes out on the Channels
layer group `CHANGES_GROUP` once the transaction commits (nothing for one that rolls back). The data plane
listens, rebuilds its route table and closes the streams of routes that were removed or changed. If the layer
cannot be reached the change is still saved; processes then pick it up at their next periodic reload.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

CHANGES_GROUP = "bindings.changes"
CHANGE_TYPE = "bindings.changed"


def announce(kind: str = "", name: str = "") -> None:
    """Send the change event now (called after commit)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(CHANGES_GROUP, {"type": CHANGE_TYPE, "kind": kind, "name": name})
    except Exception:
        log.warning("could not announce a configuration change; web processes reload it periodically", exc_info=True)


def announce_after_commit(kind: str, name: str) -> None:
    transaction.on_commit(lambda: announce(kind, name))
