"""Query parameters of the API's list endpoints (django-filter), documented in the OpenAPI schema.

`ApiFilterBackend` picks the filter set by the model of the view's queryset, so a viewset needs no wiring and
every list endpoint filters the same way: exact `?topic=`, `?endpoint=`, `?guard=` on routes, `?search=` for a
case-insensitive substring. A value that cannot be a filter (a NUL character, say) is a 400, not a query.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Exists, Model, OuterRef, Q, QuerySet
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.pagination import LimitOffsetPagination

from bindings.models import Catalog, Change, Endpoint, Guard, Route, RouteCondition, TopicModel
from bindings.models.revocation import Revocation

MAX_PAGE = 1000
KINDS = ("endpoint", "route", "guard", "revocation", "catalog", "topic-model")  # what the history records


class ApiPagination(LimitOffsetPagination):
    """`?limit=&offset=`, `limit` capped: an unbounded limit reaches Postgres as an out-of-range LIMIT."""

    max_limit = MAX_PAGE


class RouteFilterSet(django_filters.FilterSet):
    topic = django_filters.CharFilter(field_name="topic", help_text="Routes to exactly this topic (template).")
    endpoint = django_filters.CharFilter(field_name="endpoint__name", help_text="Routes of the endpoint so named.")
    guard = django_filters.CharFilter(
        field_name="guards__guard__name", distinct=True, help_text="Routes the guard so named protects."
    )
    search = django_filters.CharFilter(
        method="filter_search", help_text="Routes whose name, topic or a path contains this, ignoring case."
    )

    class Meta:
        model = Route
        fields: tuple[str, ...] = ()

    def filter_search(self, queryset: QuerySet[Route], name: str, value: str) -> QuerySet[Route]:
        in_path = RouteCondition.objects.filter(route=OuterRef("pk"), path__icontains=value)
        return queryset.filter(Q(name__icontains=value) | Q(topic__icontains=value) | Exists(in_path))


class EndpointFilterSet(django_filters.FilterSet):
    search = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", help_text="Endpoints whose name contains this, ignoring case."
    )

    class Meta:
        model = Endpoint
        fields: tuple[str, ...] = ()


class GuardFilterSet(django_filters.FilterSet):
    issuer = django_filters.CharFilter(field_name="issuer", help_text="Guards of exactly this issuer.")
    search = django_filters.CharFilter(
        method="filter_search", help_text="Guards whose name or issuer contains this, ignoring case."
    )

    class Meta:
        model = Guard
        fields: tuple[str, ...] = ()

    def filter_search(self, queryset: QuerySet[Guard], name: str, value: str) -> QuerySet[Guard]:
        return queryset.filter(Q(name__icontains=value) | Q(issuer__icontains=value))


class ChangeFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=[(kind, kind) for kind in KINDS], help_text="What was changed.")
    name = django_filters.CharFilter(help_text="The name of the object changed.")
    actor = django_filters.CharFilter(help_text="Who changed it (a user name, or a command's).")
    source = django_filters.CharFilter(help_text="Through what: admin, api, import, command or shell.")
    action = django_filters.ChoiceFilter(choices=Change.Action.choices)

    class Meta:
        model = Change
        fields: tuple[str, ...] = ()


class RevocationFilterSet(django_filters.FilterSet):
    guard = django_filters.CharFilter(field_name="guard__name", help_text="Revocations of the guard so named.")
    identity = django_filters.CharFilter(help_text="Revocations of exactly this identity.")
    jti = django_filters.CharFilter(help_text="Revocations of exactly this token id.")
    active = django_filters.BooleanFilter(
        method="filter_active", help_text="true: only those still in force; false: only those that lapsed."
    )

    class Meta:
        model = Revocation
        fields: tuple[str, ...] = ()

    def filter_active(self, queryset: QuerySet[Revocation], name: str, value: bool) -> QuerySet[Revocation]:
        now = timezone.now()
        return queryset.filter(until__gt=now) if value else queryset.filter(until__lte=now)


class CatalogFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=Catalog.Kind.choices, help_text="Catalogs of this kind.")
    search = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", help_text="Catalogs whose name contains this, ignoring case."
    )

    class Meta:
        model = Catalog
        fields: tuple[str, ...] = ()


class TopicModelFilterSet(django_filters.FilterSet):
    catalog = django_filters.CharFilter(
        method="filter_catalog", help_text="Topic models whose key or value names the catalog so named."
    )
    search = django_filters.CharFilter(
        field_name="topic", lookup_expr="icontains", help_text="Topic models whose topic contains this."
    )

    class Meta:
        model = TopicModel
        fields: tuple[str, ...] = ()

    def filter_catalog(self, queryset: QuerySet[TopicModel], name: str, value: str) -> QuerySet[TopicModel]:
        return queryset.filter(Q(key_catalog__name=value) | Q(value_catalog__name=value))


FILTER_SETS: dict[type[Model], type[django_filters.FilterSet]] = {
    Catalog: CatalogFilterSet,
    TopicModel: TopicModelFilterSet,
    Change: ChangeFilterSet,
    Route: RouteFilterSet,
    Endpoint: EndpointFilterSet,
    Guard: GuardFilterSet,
    Revocation: RevocationFilterSet,
}


class ApiFilterBackend(DjangoFilterBackend):
    """The filter set of the queryset's model, from `FILTER_SETS`; a view may still name its own."""

    def get_filterset_class(self, view: Any, queryset: QuerySet[Any] | None = None) -> Any:
        own = super().get_filterset_class(view, queryset)
        if own is not None or queryset is None:
            return own
        return FILTER_SETS.get(queryset.model)
