"""The analytics in the REST API: the numbers the dashboards show, per route.

`GET /api/v1/analytics/routes/?range=|from=&to=`: every route that delivered in the range, with its totals.
`GET /api/v1/analytics/routes/<name>/?from=&to=&step=minute|hour`: one route's totals and series.
The range is read as the dashboards read it (default: the last hour); a bad one is a 400 problem.
Reading them needs `bindings.view_route`: who may see the routes may see their traffic (bindings.api.permissions).
"""

from __future__ import annotations

from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from analytics import queries
from analytics.views import BadRange, parse_range
from bindings.api.permissions import reading

RANGE_PARAMETERS = [
    OpenApiParameter("range", str, enum=["1h", "24h", "7d"], description="A range ending now (default 1h)."),
    OpenApiParameter("from", str, description="Start, ISO 8601 (UTC if no offset); with `to`, instead of `range`."),
    OpenApiParameter("to", str, description="End, ISO 8601 (default: now)."),
]


class RefusalReasonSerializer(serializers.Serializer[Any]):
    status = serializers.IntegerField()
    reason = serializers.CharField()
    count = serializers.IntegerField()


class CountsSerializer(serializers.Serializer[Any]):
    """What a range (totals) and each step of a series (points) both hold."""

    events = serializers.IntegerField(help_text="Events written, one per client that got it: live and catch-up.")
    catchup_events = serializers.IntegerField(
        help_text="Of the events, those written while their stream was catching up (history, a resume, a shared "
        "catch-up read) rather than standing at the live end."
    )
    bytes = serializers.IntegerField()
    streams_opened = serializers.IntegerField()
    streams_closed = serializers.IntegerField()
    resumes = serializers.IntegerField()
    fresh_starts = serializers.IntegerField()
    malformed_ids = serializers.IntegerField()
    since_starts = serializers.IntegerField()
    slow_closes = serializers.IntegerField()
    token_expiries = serializers.IntegerField()
    refusals = serializers.IntegerField()
    p50_ms = serializers.FloatField(
        allow_null=True,
        help_text="Live latency: Kafka timestamp to write, of live events only (their stream stood at the live "
        "end); exact to 19 %.",
    )
    p95_ms = serializers.FloatField(allow_null=True, help_text="Live latency, as p50_ms.")
    p99_ms = serializers.FloatField(allow_null=True, help_text="Live latency, as p50_ms.")
    catchup_age_p50_ms = serializers.FloatField(
        allow_null=True,
        help_text="Catch-up age: Kafka timestamp to write, of catch-up events only; exact to 19 %, and 1048576 "
        "for 17 minutes or more.",
    )
    catchup_age_p95_ms = serializers.FloatField(allow_null=True, help_text="Catch-up age, as catchup_age_p50_ms.")
    catchup_age_p99_ms = serializers.FloatField(allow_null=True, help_text="Catch-up age, as catchup_age_p50_ms.")


class TotalsSerializer(CountsSerializer):
    refusals_by_reason = RefusalReasonSerializer(many=True)


class PointSerializer(CountsSerializer):
    time = serializers.DateTimeField(help_text="The minute's or hour's start (UTC).")
    streams_open = serializers.IntegerField(help_text="Streams open during the step (at most).")


class RouteSummarySerializer(serializers.Serializer[Any]):
    route = serializers.CharField()
    totals = TotalsSerializer()


class RouteAnalyticsSerializer(serializers.Serializer[Any]):
    route = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    step = serializers.ChoiceField(choices=list(queries.STEPS))
    totals = TotalsSerializer()
    series = PointSerializer(many=True)


def _window(request: Request) -> queries.Range:
    try:
        return parse_range(request.query_params)[0]
    except BadRange as exc:
        raise ValidationError({"range": [str(exc)]}) from None


class RouteAnalyticsListView(APIView):
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = reading("bindings.view_route")

    @extend_schema(
        operation_id="analytics_routes_list",
        tags=["analytics"],
        summary="Every route that delivered in the range, with its totals",
        parameters=RANGE_PARAMETERS,
        responses={200: RouteSummarySerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        window = _window(request)
        body = [{"route": name, "totals": queries.totals(window, name)} for name in queries.route_names(window)]
        return Response(RouteSummarySerializer(body, many=True).data)


class RouteAnalyticsView(APIView):
    required_permissions: ClassVar[dict[str, tuple[str, ...]]] = reading("bindings.view_route")

    @extend_schema(
        operation_id="analytics_routes_retrieve",
        tags=["analytics"],
        summary="One route's totals and series over the range",
        parameters=[
            *RANGE_PARAMETERS,
            OpenApiParameter("step", str, enum=list(queries.STEPS), description="minute (default to 6 h) or hour"),
        ],
        responses={200: RouteAnalyticsSerializer},
    )
    def get(self, request: Request, name: str) -> Response:
        window = _window(request)
        body = {
            "route": name,
            "start": window.start,
            "end": window.end,
            "step": window.step,
            "totals": queries.totals(window, name),
            "series": queries.series(window, name),
        }
        return Response(RouteAnalyticsSerializer(body).data)
