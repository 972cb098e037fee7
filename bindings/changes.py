"""Change events: every committed change to the configuration is announced to every web process.

Whatever writes (admin, API, `services.do_*`, a shell), a model signal schedules an announcement, sent
after commit on the Channels layer group `CHANGES_GROUP`. The data plane listens and rebuilds
its route table. If the layer cannot be reached the change is still saved; processes then pick it up at their
next periodic reload.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models.signals import post_delete, post_save

log = logging.getLogger(__name__)

CHANGES_GROUP = "bindings.changes"
CHANGE_MESSAGE = {"type": "bindings.changed"}


def announce() -> None:
    """Send the change event now (called after commit)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(CHANGES_GROUP, dict(CHANGE_MESSAGE))
    except Exception:
        log.warning("could not announce a configuration change; web processes reload it periodically", exc_info=True)


def _changed(sender: type, **kwargs: Any) -> None:
    # One per saved row: a route saved with its paths and filters announces a few times, which the
    # listeners fold into one reload. Nothing is announced for a transaction that rolls back.
    transaction.on_commit(announce)


def connect(models: list[type]) -> None:
    for model in models:
        post_save.connect(_changed, sender=model, dispatch_uid=f"bindings-changes-save-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"bindings-changes-delete-{model.__name__}")
