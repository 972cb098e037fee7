from __future__ import annotations

from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    verbose_name = "SSE streams"

    def ready(self) -> None:
        # The control plane's route page shows what the data plane counted, without importing it (import-linter).
        # Imported here: bindings.insights reads models, which cannot be imported while the apps are being loaded.
        from bindings import insights  # noqa: PLC0415
        from streams.edge.metrics import decode_errors_matching  # noqa: PLC0415

        insights.register_decode_errors(decode_errors_matching)
