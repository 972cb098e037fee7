"""Catalogs and topic models in the admin (`bindings.admin` imports this module to register them).

A catalog's page lists its inline schemas, every version kept, read only; a row added there is the next version
of its subject (the first, for a new subject), checked as it is saved: a bad Avro schema, a `.proto` that does
not compile or a JSON Schema that is not one is an error on the row's schema field. The registry's Authorization
header is write-only: the page says whether one is set and when it was last set, and takes a new one (or its
removal), never showing it. A save that moves the URL to another scheme, host or port removes the header unless
it gives a new one, and says so: the header is the registry's it was given for. A URL with credentials in it is
an error on its field. Every save and delete is recorded in the history and announced, as the API's are.
"""

from __future__ import annotations

from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from django import forms
from django.contrib import admin, messages
from django.db.models import Max, Q, QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils import timezone

from bindings.history import CATALOG, TOPIC_MODEL, Actor, object_state, record
from bindings.models import Catalog, InlineSchema, TopicModel
from bindings.models.catalogs import redacted_url, same_origin


class CatalogForm(forms.ModelForm[Catalog]):
    new_auth = forms.CharField(
        label="Authorization header",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Sent to the registry, e.g. Basic dXNlcjpwYXNz. Never shown: leave empty to keep the current one.",
    )
    remove_auth = forms.BooleanField(label="Remove the Authorization header", required=False)

    class Meta:
        model = Catalog
        fields = ("name", "kind", "url", "max_age_s")

    auth_removed = False  # the save removed the header because the URL moved

    def clean(self) -> dict[str, Any]:
        # The header goes onto the instance before the model's clean, which checks it with the kind and URL (the
        # instance still has the URL it had: the form's values go onto it after this).
        cleaned = super().clean() or {}
        if cleaned.get("remove_auth"):
            self.instance.auth = ""
        elif cleaned.get("new_auth"):
            self.instance.auth = cleaned["new_auth"]
        elif self.instance.auth and not same_origin(self.instance.url, cleaned.get("url") or ""):
            self.instance.auth, self.auth_removed = "", True
        return cleaned

    def add_error(self, field: str | None, error: Any) -> None:
        """The model's errors on the header go on the field that sets it."""
        if field is None and "auth" in getattr(error, "error_dict", {}):
            error.error_dict["new_auth"] = error.error_dict.pop("auth")
        super().add_error(field, error)


class InlineSchemaFormSet(BaseInlineFormSet[InlineSchema, Catalog, Any]):
    def save_new(self, form: forms.ModelForm[InlineSchema], commit: bool = True) -> InlineSchema:
        """A new row is the next version of its subject: saving a subject again never rewrites an old version."""
        row: InlineSchema = super().save_new(form, commit=False)
        latest = InlineSchema.objects.filter(catalog=self.instance, subject=row.subject).aggregate(Max("version"))
        row.version = (latest["version__max"] or 0) + 1
        if commit:
            row.save()
        return row


class InlineSchemaInline(admin.StackedInline[InlineSchema, Catalog]):
    model = InlineSchema
    formset = InlineSchemaFormSet
    fields = ("subject", "format", "text", "version")
    extra = 0
    can_delete = False
    verbose_name = "inline schema"
    verbose_name_plural = "inline schemas (every version kept; a schema added is its subject's next version)"

    readonly_fields = ("version",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a version, once saved, stays as it was: add the next one instead


_before: WeakKeyDictionary[HttpRequest, dict[str, Any] | None] = WeakKeyDictionary()  # the object as it was


class _Recorded:
    """Saves and deletes go into the history and are announced, like every other write."""

    kind = ""

    @staticmethod
    def key(obj: Any) -> str:
        raise NotImplementedError

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        fresh = type(obj).objects.filter(pk=obj.pk).first() if obj.pk is not None else None
        _before[request] = object_state(self.kind, self.key(fresh)) if fresh is not None else None
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        key = self.key(form.instance)
        record(
            self.kind, key, _before.pop(request, None), object_state(self.kind, key), Actor.of(request.user, "admin")
        )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        key = self.key(obj)
        before = object_state(self.kind, key)
        super().delete_model(request, obj)  # type: ignore[misc]
        record(self.kind, key, before, None, Actor.of(request.user, "admin"))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Catalog)
class CatalogAdmin(_Recorded, admin.ModelAdmin[Catalog]):
    kind = CATALOG
    form = CatalogForm
    inlines = (InlineSchemaInline,)
    list_display = ("name", "kind", "shown_url", "auth_is_set", "max_age_s", "updated")
    list_filter = ("kind",)
    search_fields = ("name", "url", "schemas__subject")
    readonly_fields = ("auth_status",)

    @staticmethod
    def key(obj: Any) -> str:
        return str(obj.name)

    def get_fields(self, request: HttpRequest, obj: Catalog | None = None) -> Any:
        return ("name", "kind", "url", "auth_status", "new_auth", "remove_auth", "max_age_s")

    def get_readonly_fields(self, request: HttpRequest, obj: Catalog | None = None) -> Any:
        # Topic models name the catalog: it keeps its name, as in the API.
        return ("auth_status", "name") if obj is not None else ("auth_status",)

    @admin.display(description="URL", ordering="url")
    def shown_url(self, catalog: Catalog) -> str:
        return redacted_url(catalog.url)

    @admin.display(boolean=True, description="auth set")
    def auth_is_set(self, catalog: Catalog) -> bool:
        return bool(catalog.auth)

    @admin.display(description="Authorization header")
    def auth_status(self, catalog: Catalog) -> str:
        if not catalog.auth:
            return "not set"
        when = f" (set {catalog.auth_updated:%Y-%m-%d %H:%M} UTC)" if catalog.auth_updated else ""
        return f"set{when}; not shown"

    def save_model(self, request: HttpRequest, obj: Catalog, form: Any, change: bool) -> None:
        fresh = Catalog.objects.filter(pk=obj.pk).first() if obj.pk is not None else None
        if obj.auth != (fresh.auth if fresh is not None else ""):
            obj.auth_updated = timezone.now()
        super().save_model(request, obj, form, change)
        if getattr(form, "auth_removed", False):
            self.message_user(
                request,
                "The Authorization header was removed: it was given for the registry at the old URL's scheme, host "
                "and port. Give it again if the new URL's registry takes it.",
                messages.WARNING,
            )


_SIDE = ("model", "catalog", "strategy", "schema_id", "subject", "version", "record", "encoding")


@admin.register(TopicModel)
class TopicModelAdmin(_Recorded, admin.ModelAdmin[TopicModel]):
    kind = TOPIC_MODEL
    list_display = ("topic", "key_model", "key_catalog", "value_model", "value_catalog", "updated")
    list_filter = ("value_model", "key_model", "value_catalog", "key_catalog")
    search_fields = ("topic", "value_subject", "key_subject")
    list_select_related = ("key_catalog", "value_catalog")
    fieldsets: ClassVar[Any] = (
        (None, {"fields": ("topic",), "description": "A topic name, or a pattern: * matches any characters."}),
        ("Key", {"fields": tuple(f"key_{name}" for name in _SIDE)}),
        ("Value", {"fields": tuple(f"value_{name}" for name in _SIDE)}),
    )

    @staticmethod
    def key(obj: Any) -> str:
        return str(obj.topic)

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[TopicModel], search_term: str) -> Any:
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term:  # by the catalog's name too, on either side
            found |= queryset.filter(Q(key_catalog__name=search_term) | Q(value_catalog__name=search_term))
        return found, duplicates
