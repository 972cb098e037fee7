"""The API's AsyncAPI paths (included under /api/v1/ by config.urls)."""

from __future__ import annotations

from django.urls import path

from bindings.api.asyncapi import AsyncApiExportView, AsyncApiImportView

urlpatterns = [
    path("asyncapi.yaml", AsyncApiExportView.as_view(), name="asyncapi-export"),
    path("import/asyncapi", AsyncApiImportView.as_view(), name="asyncapi-import"),
]
