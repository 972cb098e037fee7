"""The dashboards, under /analytics/ (config.urls)."""

from __future__ import annotations

from django.urls import path

from analytics import views

urlpatterns = [
    path("", views.overview, name="analytics-overview"),
    path("routes/<slug:name>/", views.route_page, name="analytics-route"),
]
