"""Endpoints and routes in the admin.

A route is edited with its conditions and filters inline. Whether the `${params.x}` of the topic and the
filters are declared by every path pattern can only be told with all three in hand, so the route form checks
it against the inline formsets of the same request (`_Edit`) and puts each error on the field that is wrong.
"""

from __future__ import annotations

from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Prefetch, QuerySet
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from bindings.models import Endpoint, Route, RouteCondition, RouteFilter, check_route_params


class _Edit:
    """The inline formsets of one admin request, so the route form can validate across them."""

    def __init__(self) -> None:
        self.conditions: RouteConditionFormSet | None = None
        self.filters: RouteFilterFormSet | None = None

    def check(self, form: RouteForm) -> None:
        if self.conditions is None or self.filters is None or not self.conditions.is_bound:
            return
        # Validates each inline form (once; formsets cache their errors) so their cleaned data is known.
        self.conditions.is_valid()
        self.filters.is_valid()
        condition_forms = self.conditions.live_forms()
        filter_forms = self.filters.live_forms()
        topic_errors, condition_errors, filter_errors = check_route_params(
            form.cleaned_data.get("topic"),
            [f.instance if f.is_valid() else None for f in condition_forms],
            [f.instance if f.is_valid() else None for f in filter_forms],
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
    fields = ("key", "headers", "value_path", "value_equals", "position")
    extra = 0
    verbose_name = "filter"
    verbose_name_plural = "filters (a message is sent when any matches; none = the whole topic)"


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin[Endpoint]):
    list_display = ("name", "retry_ms", "keepalive_s", "cors_origins", "cors_credentials")
    search_fields = ("name",)


@admin.register(Route)
class RouteAdmin(admin.ModelAdmin[Route]):
    form = RouteForm
    inlines = (RouteConditionInline, RouteFilterInline)
    list_display = ("name", "paths", "topic", "endpoint", "start", "position")
    list_editable = ("position",)
    list_filter = ("endpoint", "start", "event_id", "slow_client")
    search_fields = ("name", "topic", "conditions__path")
    ordering = ("position", "id")
    fields = ("name", "position", "endpoint", "topic", "event_id", "start", "caught_up", "slow_client")

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

    def get_formsets_with_inlines(self, request: HttpRequest, obj: Route | None = None) -> Any:
        edit = _edit(request)
        for formset, inline in super().get_formsets_with_inlines(request, obj):
            yield type(formset.__name__, (formset,), {"edit": edit}), inline
