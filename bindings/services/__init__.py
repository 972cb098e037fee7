"""Write functions: every change to the configuration goes through here.

Each records who changed what (`Change`, shown in the admin and the API) and announces the change to every
web process once the transaction commits (`bindings.changes`). `actor` names who writes: the API and the
admin pass the signed-in user, commands their own name. Each validates as the admin does and raises Django's
`ValidationError` with a `message_dict` whose keys name the bad field.

`configuration` writes endpoints, routes, guards and revocations; `catalogs` writes catalogs and topic models;
`checks` holds what they share.
"""

from bindings.services.catalogs import (
    do_delete_catalog,
    do_delete_topic_model,
    do_put_catalog,
    do_put_topic_model,
)
from bindings.services.configuration import (
    do_change_revocation,
    do_delete_endpoint,
    do_delete_guard,
    do_delete_revocation,
    do_delete_route,
    do_put_endpoint,
    do_put_guard,
    do_put_route,
    do_revoke,
)

__all__ = [
    "do_change_revocation",
    "do_delete_catalog",
    "do_delete_endpoint",
    "do_delete_guard",
    "do_delete_revocation",
    "do_delete_route",
    "do_delete_topic_model",
    "do_put_catalog",
    "do_put_endpoint",
    "do_put_guard",
    "do_put_route",
    "do_put_topic_model",
    "do_revoke",
]
