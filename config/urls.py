from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView
from rest_framework.routers import DefaultRouter

from bindings.api import EndpointViewSet, GuardViewSet, RouteViewSet

router = DefaultRouter()
router.register("routes", RouteViewSet)
router.register("endpoints", EndpointViewSet)
router.register("guards", GuardViewSet)

urlpatterns = [
    path("", TemplateView.as_view(template_name="demo.html"), name="demo"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(router.urls)),
]
