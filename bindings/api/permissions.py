"""Who may use the REST API: Django's model permissions, the same ones that limit what the admin shows.

Every request needs the permissions of what it touches: `view_<model>` to read (GET, HEAD, OPTIONS), `add_` to
create (POST), `change_` to replace or merge (PUT, PATCH; a PUT that creates also needs `add_`), `delete_` to
delete. Reading needs `view_` too, unlike DRF's `DjangoModelPermissions`: a staff user the admin shows no routes
should not list them through the API either. Superusers hold every permission. Members of the `api-readers`
group hold the `view_` permissions (given by a migration, and by `api_readers()`); `manage.py api_token` gives a
machine user the writer's set (`grant_api_writer`). Being staff alone grants nothing here.

Anonymous requests are refused before this runs with a 401 and `WWW-Authenticate: Token` (TokenAuthentication
is the first authentication class, so DRF has a challenge to send); a signed-in user without a permission is a
403 whose detail names the missing permissions.

A view says what it touches with `required_permissions` (method -> permissions, `app_label.codename`); a model
view set's come from its queryset's model. A method a view handles but does not declare, or a view with neither,
is refused (a permission nobody holds): nothing is open by omission.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.db.models import Model, QuerySet
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

API_READERS = "api-readers"
CONFIGURATION_MODELS = ("endpoint", "route", "guard", "catalog", "topicmodel")
# What the api-readers group holds, and what every reading view needs of the configuration.
READ_PERMISSIONS = tuple(f"view_{model}" for model in (*CONFIGURATION_MODELS, "change"))
WRITE_PERMISSIONS = READ_PERMISSIONS + tuple(
    f"{action}_{model}" for action in ("add", "change", "delete") for model in CONFIGURATION_MODELS
)
ACTIONS = {
    "GET": ("view",),
    "HEAD": ("view",),
    "OPTIONS": ("view",),
    "POST": ("add",),
    "PUT": ("change",),
    "PATCH": ("change",),
    "DELETE": ("delete",),
}


def model_permissions(model: type[Model], *actions: str) -> tuple[str, ...]:
    return tuple(f"{model._meta.app_label}.{action}_{model._meta.model_name}" for action in actions)


def configuration_permissions(*actions: str) -> tuple[str, ...]:
    """`bindings.<action>_<model>` for endpoints, routes, guards, catalogs and topic models: what an import or
    export touches."""
    return tuple(f"bindings.{action}_{model}" for action in actions for model in CONFIGURATION_MODELS)


def reading(*permissions: str) -> dict[str, tuple[str, ...]]:
    """`required_permissions` for a view that only reads."""
    return dict.fromkeys(("GET", "HEAD", "OPTIONS"), permissions)


def missing_permissions(user: object, needed: Iterable[str]) -> list[str]:
    """What `user` lacks of `needed`; everything for a user model without Django's permissions."""
    has_perm = getattr(user, "has_perm", None)
    return [permission for permission in needed if has_perm is None or not has_perm(permission)]


def refusal(user: object, missing: Sequence[str]) -> str:
    """The 403's detail: which permissions are missing, and where to grant them."""
    groups = getattr(user, "groups", None)
    reader = groups is not None and groups.filter(name=API_READERS).exists()
    who = "This user (in the api-readers group, which may only read)" if reader else "This user"
    plural = len(missing) > 1
    return (
        f"{who} lacks the permission{'s' if plural else ''} {', '.join(missing)}. Grant {'them' if plural else 'it'} "
        "to the user or to one of its groups in the admin, or mint a writer's token with `manage.py api_token`."
    )


def require(user: object, needed: Iterable[str]) -> None:
    """Refuse with a 403 naming what is missing; for checks that depend on the request's content."""
    missing = missing_permissions(user, needed)
    if missing:
        raise PermissionDenied(refusal(user, missing))


class HasModelPermissions(BasePermission):
    """The Django model permissions of what the request touches (see the module's docstring)."""

    message = "This user has no API access."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return False
        missing = missing_permissions(user, self.needed(request, view))
        if not missing:
            return True
        # DRF reads `message` after a refusal.
        self.message = refusal(user, missing)
        return False

    @staticmethod
    def needed(request: Request, view: APIView) -> tuple[str, ...]:
        method = (request.method or "GET").upper()
        if not hasattr(view, method.lower()):
            return ()  # no handler: DRF answers 405 Method Not Allowed
        declared: Mapping[str, Sequence[str]] | None = getattr(view, "required_permissions", None)
        if declared is not None:
            return tuple(declared.get(method, ("nobody.may_use_this_method",)))
        queryset = getattr(view, "queryset", None)
        if queryset is None or method not in ACTIONS:
            return ("nobody.may_use_this_view",)
        return model_permissions(queryset.model, *ACTIONS[method])


def _bindings_permissions(codenames: Iterable[str]) -> QuerySet[Permission]:
    return Permission.objects.filter(content_type__app_label="bindings", codename__in=list(codenames))


def api_readers() -> Group:
    """The `api-readers` group, holding the permissions to read the whole API (created if missing)."""
    group, _ = Group.objects.get_or_create(name=API_READERS)
    group.permissions.add(*_bindings_permissions(READ_PERMISSIONS))
    return group


def grant_api_writer(user: AbstractBaseUser) -> None:
    """Give `user` the permissions to read and write endpoints, routes, guards, catalogs and topic models through
    the API."""
    user.user_permissions.add(*_bindings_permissions(WRITE_PERMISSIONS))  # type: ignore[attr-defined]
