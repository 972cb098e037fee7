from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from analytics.api import RouteAnalyticsListView, RouteAnalyticsView
from bindings.api.catalogs import CatalogViewSet, TopicModelViewSet
from bindings.api.resources import ChangeViewSet, EndpointViewSet, GuardViewSet, RouteViewSet
from bindings.api.revocations import RevocationViewSet
from bindings.api.zilla import ZillaExportView, ZillaImportView
from streams.edge.preview import recent_records

router = DefaultRouter()
router.register("routes", RouteViewSet)
router.register("endpoints", EndpointViewSet)
router.register("guards", GuardViewSet)
router.register("revocations", RevocationViewSet)
router.register("catalogs", CatalogViewSet)
router.register("topic-models", TopicModelViewSet)
router.register("changes", ChangeViewSet)

urlpatterns = [
    path("", TemplateView.as_view(template_name="demo.html"), name="demo"),
    # The route page's preview of what the route does to its topic's recent records: the data plane reads them.
    path("admin/recent-records/<slug:name>", recent_records, name="recent-records"),
    path("admin/", admin.site.urls),
    path("analytics/", include("analytics.urls")),
    path("api/v1/analytics/routes/", RouteAnalyticsListView.as_view(), name="analytics-routes"),
    path("api/v1/analytics/routes/<slug:name>/", RouteAnalyticsView.as_view(), name="analytics-route-api"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/import/zilla", ZillaImportView.as_view(), name="zilla-import"),
    path("api/v1/export/zilla", ZillaExportView.as_view(), name="zilla-export"),
    path("api/v1/", include("bindings.api.urls")),
    path("api/v1/", include(router.urls)),
]

# Under /api/ Django's own error pages are problem bodies too (bindings/api/problems.py).
handler400 = "bindings.api.problems.bad_request"
handler403 = "bindings.api.problems.permission_denied"
handler404 = "bindings.api.problems.page_not_found"
handler500 = "bindings.api.problems.server_error"
