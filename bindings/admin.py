"""Endpoints, routes, guards and the change history in the admin (catalogs and topic models: `catalog_admin`).

Every save and delete is recorded through `bindings.history.record` (who changed what, announced to the web
processes after commit), as the API's writes are. A route's page has a live preview of its stream, a copyable
`EventSource` snippet, and how its topic's records are decoded and how many were skipped (`bindings.insights`).

A route is edited with its conditions, filters and guards inline. Whether the `${params.x}` of the topic and the
filters are declared by every path pattern can only be told with all three in hand, so the route form checks
it against the inline formsets of the same request (`_Edit`) and puts each error on the field that is wrong.
"""

from __future__ import annotations

from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from django import forms
from django.contrib import admin
from django.contrib import messages as admin_messages
from django.core.exceptions import ValidationError
from django.db.models import Prefetch, QuerySet
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils import timezone

from bindings import catalog_admin  # noqa: F401  (registers catalogs and topic models)
from bindings.history import Actor, record, route_state
from bindings.insights import topic_insight
from bindings.models import (
    Change,
    Endpoint,
    Guard,
    Route,
    RouteCondition,
    RouteFilter,
    RouteGuard,
    check_route_params,
)
from bindings.models.revocation import Revocation, revocation_representation
from bindings.representations import endpoint_representation, guard_representation
from bindings.selectors import route_specs
from bindings.shadowing import shadows


class _Edit:
    """The inline formsets of one admin request, so the route form can validate across them."""

    def __init__(self) -> None:
        self.conditions: RouteConditionFormSet | None = None
        self.filters: RouteFilterFormSet | None = None
        self.guards: RouteGuardFormSet | None = None
        self.before: dict[str, Any] | None = None  # the object as it was, for the history

    def check(self, form: RouteForm) -> None:
        if self.conditions is None or self.filters is None or not self.conditions.is_bound:
            return
        # Validates each inline form (once; formsets cache their errors) so their cleaned data is known.
        self.conditions.is_valid()
        self.filters.is_valid()
        condition_forms = self.conditions.live_forms()
        filter_forms = self.filters.live_forms()
        guards = None
        if self.guards is not None and self.guards.is_bound and self.guards.is_valid():
            guards = {
                f.cleaned_data["guard"].name: set(f.cleaned_data["guard"].attributes)
                for f in self.guards.live_forms()
                if f.cleaned_data.get("guard")
            }
        topic_errors, condition_errors, filter_errors = check_route_params(
            form.cleaned_data.get("topic"),
            [f.instance if f.is_valid() else None for f in condition_forms],
            [f.instance if f.is_valid() else None for f in filter_forms],
            guards,
        )
        for message in topic_errors:
            form.add_error("topic", message)
        for index, messages in condition_errors.items():
            for message in messages:
                condition_forms[index].add_error("path", message)
        for index, fields in filter_errors.items():
            for field, messages in fields.items():
                for message in messages:
                    filter_forms[index].add_error(field, message)


_edits: WeakKeyDictionary[HttpRequest, _Edit] = WeakKeyDictionary()


def _edit(request: HttpRequest) -> _Edit:
    return _edits.setdefault(request, _Edit())


class RouteForm(forms.ModelForm[Route]):
    edit: ClassVar[_Edit | None] = None

    def clean(self) -> dict[str, Any] | None:
        cleaned = super().clean()
        if self.edit is not None:
            self.edit.check(self)
        return cleaned


class _RouteInlineFormSet(BaseInlineFormSet[Any, Route, Any]):
    edit: ClassVar[_Edit | None] = None

    def live_forms(self) -> list[forms.ModelForm[Any]]:
        """The forms that will be saved (or would be, once valid): not deleted, not left empty."""
        return [
            form
            for form in self.forms
            if not (self.can_delete and form.cleaned_data.get(DELETION_FIELD_NAME, False))
            and (form.instance.pk is not None or form.has_changed() or not form.empty_permitted)
        ]


class RouteConditionFormSet(_RouteInlineFormSet):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.edit is not None:
            self.edit.conditions = self

    def clean(self) -> None:
        super().clean()
        if not self.live_forms():
            raise ValidationError("A route needs at least one path.")


class RouteFilterFormSet(_RouteInlineFormSet):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.edit is not None:
            self.edit.filters = self


class RouteGuardFormSet(_RouteInlineFormSet):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.edit is not None:
            self.edit.guards = self


class RouteConditionInline(admin.TabularInline[RouteCondition, Route]):
    model = RouteCondition
    formset = RouteConditionFormSet
    fields = ("path", "position")
    min_num = 1
    extra = 0
    verbose_name = "path"
    verbose_name_plural = "paths (the route matches when any matches)"


class RouteFilterInline(admin.StackedInline[RouteFilter, Route]):
    model = RouteFilter
    formset = RouteFilterFormSet
    fields = ("key", "headers", "value_path", "value_equals", "expression", "position")
    extra = 0
    verbose_name = "filter"
    verbose_name_plural = "filters (a message is sent when any matches; none = the whole topic)"


class RouteGuardInline(admin.TabularInline[RouteGuard, Route]):
    model = RouteGuard
    formset = RouteGuardFormSet
    fields = ("guard", "roles")
    extra = 0
    verbose_name = "guard"
    verbose_name_plural = "guards (every guard must authorise the request, with all its roles)"


class _Recorded:
    """Admin saves and deletes go into the change history, and are announced, like every other write."""

    kind = ""

    @staticmethod
    def state(obj: Any) -> dict[str, Any] | None:
        raise NotImplementedError

    def _note_before(self, request: HttpRequest, obj: Any) -> None:
        fresh = type(obj).objects.filter(pk=obj.pk).first() if obj.pk is not None else None
        _edit(request).before = None if fresh is None else self.state(fresh)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        self._note_before(request, obj)
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        obj = form.instance
        record(self.kind, obj.name, _edit(request).before, self.state(obj), Actor.of(request.user, "admin"))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        before = self.state(obj)
        super().delete_model(request, obj)  # type: ignore[misc]
        record(self.kind, obj.name, before, None, Actor.of(request.user, "admin"))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Endpoint)
class EndpointAdmin(_Recorded, admin.ModelAdmin[Endpoint]):
    kind = "endpoint"
    list_display = ("name", "retry_ms", "keepalive_s", "cors_origins", "cors_credentials")
    list_filter = ("cors_credentials",)
    search_fields = ("name",)

    @staticmethod
    def state(obj: Any) -> dict[str, Any] | None:
        return endpoint_representation(obj)


class GuardForm(forms.ModelForm[Guard]):
    jwks_url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", help_text=Guard._meta.get_field("jwks_url").help_text
    )


@admin.register(Guard)
class GuardAdmin(_Recorded, admin.ModelAdmin[Guard]):
    kind = "guard"
    form = GuardForm
    list_display = ("name", "issuer", "audience", "roles_claim", "challenge_s", "updated")
    search_fields = ("name", "issuer", "audience")
    fields = (
        "name", "issuer", "audience", "keys", "jwks_url", "roles_claim", "identity_claim", "attributes",
        "challenge_s", "cookie", "allow_tokens_without_exp",
    )  # fmt: skip

    @staticmethod
    def state(obj: Any) -> dict[str, Any] | None:
        return guard_representation(obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Guard | None = None) -> Any:
        # Routes' templates name the guard: a guard keeps its name, as in the API.
        return ("name",) if obj is not None else ()


@admin.register(Change)
class ChangeAdmin(admin.ModelAdmin[Change]):
    """The history: read only, newest first."""

    list_display = ("at", "actor", "source", "action", "kind", "name", "changed")
    list_filter = ("kind", "action", "source", "actor")
    search_fields = ("name", "actor")
    date_hierarchy = "at"
    fields = ("at", "actor", "source", "action", "kind", "name", "before", "after")
    readonly_fields = fields

    @admin.display(description="changed")
    def changed(self, change: Change) -> str:
        return ", ".join(change.changed_fields())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Change | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Change | None = None) -> bool:
        return False


@admin.register(Revocation)
class RevocationAdmin(admin.ModelAdmin[Revocation]):
    """Revocations: made and lifted here as through the API, recorded in the history and announced. Once made,
    only the end and the reason change: what a revocation covers is fixed."""

    list_display = ("guard", "identity", "jti", "until", "in_force", "created_by", "created_at")
    list_filter = ("guard", "created_by")
    list_select_related = ("guard",)
    search_fields = ("identity", "jti", "reason")
    fields = ("guard", "identity", "jti", "until", "reason", "created_by", "created_at")

    @admin.display(boolean=True, description="in force")
    def in_force(self, revocation: Revocation) -> bool:
        return revocation.until > timezone.now()

    def get_readonly_fields(self, request: HttpRequest, obj: Revocation | None = None) -> Any:
        return ("created_by", "created_at") + (("guard", "identity", "jti") if obj is not None else ())

    def save_model(self, request: HttpRequest, obj: Revocation, form: Any, change: bool) -> None:
        fresh = Revocation.objects.filter(pk=obj.pk).first() if obj.pk is not None else None
        before = None if fresh is None else revocation_representation(fresh)
        if fresh is None:
            obj.created_by = request.user.get_username()[:150]
        super().save_model(request, obj, form, change)
        record("revocation", str(obj.pk), before, revocation_representation(obj), Actor.of(request.user, "admin"))

    def delete_model(self, request: HttpRequest, obj: Revocation) -> None:
        before, pk = revocation_representation(obj), obj.pk
        super().delete_model(request, obj)
        record("revocation", str(pk), before, None, Actor.of(request.user, "admin"))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Revocation]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Route)
class RouteAdmin(_Recorded, admin.ModelAdmin[Route]):
    kind = "route"
    form = RouteForm
    inlines = (RouteConditionInline, RouteFilterInline, RouteGuardInline)
    list_display = ("name", "paths", "topic", "endpoint", "start", "position")
    list_editable = ("position",)
    list_filter = ("endpoint", "start", "event_id", "slow_client", "guards__guard")
    search_fields = ("name", "topic", "conditions__path")
    change_form_template = "admin/bindings/route/change_form.html"

    @staticmethod
    def state(obj: Any) -> dict[str, Any] | None:
        return route_state(obj.name)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> Any:
        route = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if route is not None:
            context["preview"] = preview_context(request, route)
            context["decoding"] = topic_insight(route.topic)  # bindings/insights.py
        return super().change_view(request, object_id, form_url, context)

    ordering = ("position", "id")
    fields = (
        "name",
        "position",
        "endpoint",
        "topic",
        "event_id",
        "start",
        "caught_up",
        "slow_client",
        "fields",
        "conflate_ms",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Route]:
        return (
            super()
            .get_queryset(request)
            .select_related("endpoint")
            .prefetch_related(Prefetch("conditions", queryset=RouteCondition.objects.order_by("position", "id")))
        )

    @admin.display(description="paths")
    def paths(self, route: Route) -> str:
        return ", ".join(condition.path for condition in route.conditions.all())

    def get_form(self, request: HttpRequest, obj: Route | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"edit": _edit(request)})

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        name = form.instance.name
        for shadow in shadows(route_specs()):  # bindings/shadowing.py: saved, but the operator is told
            if name in (shadow.route, shadow.by):
                admin_messages.warning(request, shadow.message())

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "GET":
            for shadow in shadows(route_specs()):
                admin_messages.warning(request, shadow.message())
        return super().changelist_view(request, extra_context)

    def get_formsets_with_inlines(self, request: HttpRequest, obj: Route | None = None) -> Any:
        edit = _edit(request)
        for formset, inline in super().get_formsets_with_inlines(request, obj):
            yield type(formset.__name__, (formset,), {"edit": edit}), inline


def preview_context(request: HttpRequest, route: Route) -> dict[str, Any]:
    """What the route page's live preview needs: its path patterns (with their params), the stream origin, the
    history of this route and whether a token is needed."""
    conditions = list(route.conditions.order_by("position", "id"))
    patterns = []
    for condition in conditions:
        try:
            pattern = condition.pattern()
        except ValueError:
            continue
        patterns.append({"text": pattern.text, "params": sorted(pattern.params)})
    return {
        "patterns": patterns,
        "origin": request.build_absolute_uri("/").rstrip("/"),
        "guarded": route.guards.exists(),
        "changes": Change.objects.filter(kind="route", name=route.name)[:10],
    }
