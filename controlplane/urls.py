from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView

from controlplane import health
from presets import api
from presets.api_errors import api_not_found, api_server_error

api_v1 = [
    path("chains", api.ChainListView.as_view(), name="api-chains"),
    path("chains/<slug:name>", api.ChainDetailView.as_view(), name="api-chain"),
    path("chains/<slug:name>/select", api.SelectView.as_view(), name="api-select"),
    path("chains/<slug:name>/revert", api.RevertView.as_view(), name="api-revert"),
    path("chains/<slug:name>/extend", api.ExtendView.as_view(), name="api-extend"),
    path("chains/<slug:name>/history", api.HistoryView.as_view(), name="api-history"),
    path("chains/<slug:name>/history/<int:version>/restore", api.RestoreView.as_view(),
         name="api-restore"),
]

urlpatterns = [
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
]


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)
