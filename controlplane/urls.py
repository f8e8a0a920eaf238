import sys

from django.contrib import admin
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import include, path
from django.views import defaults
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView

from chatops import views as slack_views
from controlplane import account_pages, health, metrics
from controlplane.database_outage import database_unavailable
from http_api import access as access_api
from http_api import alerts as alerts_api
from http_api import chains as chains_api
from http_api import drills as drills_api
from http_api import fleet as fleet_api
from http_api import guards as guards_api
from http_api import history as history_api
from http_api import notifications as notifications_api
from http_api import ofrep
from http_api import plans as plans_api
from http_api import promotions as promotions_api
from http_api.errors import api_not_found, api_server_error
from pages import access as web_access
from pages import history as web_history
from pages import views as web

api_v1 = [
    path("chains", chains_api.ChainListView.as_view(), name="api-chains"),
    path("chains/<slug:name>", chains_api.ChainDetailView.as_view(), name="api-chain"),
    path("chains/<slug:name>/select", chains_api.SelectView.as_view(), name="api-select"),
    path("chains/<slug:name>/revert", chains_api.RevertView.as_view(), name="api-revert"),
    path("chains/<slug:name>/extend", chains_api.ExtendView.as_view(), name="api-extend"),
    path("chains/<slug:name>/presets", chains_api.ChainPresetsView.as_view(), name="api-chain-presets"),
    path("chains/<slug:name>/history", chains_api.HistoryView.as_view(), name="api-history"),
    path("chains/<slug:name>/history/<int:version>/restore", chains_api.RestoreView.as_view(), name="api-restore"),
    path("alerts", alerts_api.AlertsView.as_view(), name="api-alerts"),
    path("notifications", notifications_api.NotificationsView.as_view(), name="api-notifications"),
    path("fleet", fleet_api.FleetView.as_view(), name="api-fleet"),
    path("fleet/seen", fleet_api.FleetSeenView.as_view(), name="api-fleet-seen"),
    path("chains/<slug:name>/usage", fleet_api.UsageView.as_view(), name="api-usage"),
    path("chains/<slug:name>/health", fleet_api.ChainHealthView.as_view(), name="api-health"),
    path("chains/<slug:name>/spend", fleet_api.ChainSpendView.as_view(), name="api-spend"),
    path("chains/<slug:name>/instances", fleet_api.ChainInstancesView.as_view(), name="api-instances"),
    path("plans", plans_api.PlanListView.as_view(), name="api-plans"),
    path("chains/<slug:name>/plans", plans_api.ChainPlansView.as_view(), name="api-chain-plans"),
    path("chains/<slug:name>/plans/<int:plan>", plans_api.ChainPlanView.as_view(), name="api-chain-plan"),
    path("chains/<slug:name>/plans/<int:plan>/cancel", plans_api.PlanCancelView.as_view(), name="api-plan-cancel"),
    path("chains/<slug:name>/plans/<int:plan>/start", plans_api.PlanStartView.as_view(), name="api-plan-start"),
    path("chains/<slug:name>/guard", guards_api.ChainGuardView.as_view(), name="api-chain-guard"),
    path("chains/<slug:name>/guard/off", guards_api.GuardOffView.as_view(), name="api-guard-off"),
    path("chains/<slug:name>/drills", drills_api.ChainDrillsView.as_view(), name="api-chain-drills"),
    path("drills/<int:drill>", drills_api.DrillView.as_view(), name="api-drill"),
    path("drills/<int:drill>/abort", drills_api.DrillAbortView.as_view(), name="api-drill-abort"),
    path("history", history_api.HistoryExportView.as_view(), name="api-history-export"),
    path("access-history", access_api.AccessHistoryView.as_view(), name="api-access-history"),
    path("environments/<slug:environment>/promotions", promotions_api.PromotionsView.as_view(), name="api-promotions"),
    path(
        "environments/<slug:environment>/promotions/<int:promotion>/approve",
        promotions_api.PromotionApproveView.as_view(),
        name="api-promotion-approve",
    ),
]


class FaviconView(RedirectView):
    """Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says: send them
    the icon (looked up per request: the static files' manifest may not exist at import)."""

    def get_redirect_url(self, *args: object, **kwargs: object) -> str:
        return static("presets/favicon.svg")


urlpatterns = [
    path("favicon.ico", FaviconView.as_view(), name="favicon"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("ofrep/v1/evaluate/flags", ofrep.EvaluateFlagsView.as_view(), name="ofrep-flags"),
    path("ofrep/v1/evaluate/flags/<str:key>", ofrep.EvaluateFlagView.as_view(), name="ofrep-flag"),
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", metrics.metrics_view, name="metrics"),
    # The admin's sign-in, refused (and sent to the site's) when LOCAL_PASSWORDS=false.
    path("admin/login/", account_pages.admin_sign_in),
    path("admin/", admin.site.urls),
    # Sign in and out, password change, and password reset where email is configured.
    path("accounts/", include(account_pages.urlpatterns)),
    # The on-call pages (DESIGN §8). A change POSTs twice to its URL: review, then confirm.
    path("", web.dashboard, name="dashboard"),
    path("chains/<slug:name>/", web.chain_page, name="chain"),
    path("chains/<slug:name>/select", web.select, name="chain-select"),
    path("chains/<slug:name>/revert", web.revert, name="chain-revert"),
    path("chains/<slug:name>/extend", web.extend, name="chain-extend"),
    # Planned pins: one POST each (nothing is live until a plan starts), then the chain page.
    path("chains/<slug:name>/plans", web.plan, name="chain-plan"),
    path("chains/<slug:name>/plans/<int:plan>/change", web.plan_change, name="chain-plan-change"),
    path("chains/<slug:name>/plans/<int:plan>/cancel", web.plan_cancel, name="chain-plan-cancel"),
    path("chains/<slug:name>/plans/<int:plan>/start", web.plan_start, name="chain-plan-start"),
    # Switching the live pin's guard off: one POST too (it serves nothing new), then the chain page.
    path("chains/<slug:name>/guard/off", web.guard_off, name="chain-guard-off"),
    # Failover drills: started or planned, aborted or cancelled in one POST each; a drill's report.
    path("chains/<slug:name>/drills", web.drill_start, name="chain-drill"),
    path("chains/<slug:name>/drills/<int:drill>/abort", web.drill_abort, name="chain-drill-abort"),
    path("drills/<int:drill>/", web.drill_page, name="drill"),
    path("chains/<slug:name>/history/", web_history.chain_history, name="chain-history"),
    path("chains/<slug:name>/history/<int:version>/restore", web.restore, name="chain-restore"),
    path("history/", web_history.all_history, name="history"),
    path("alerts/", web.alerts, name="alerts"),
    path("act/<str:token>/", web.act, name="act"),
    path("slack/actions", slack_views.actions, name="slack-actions"),
    path("slack/commands", slack_views.commands, name="slack-commands"),
    path("access/", web_access.access_history, name="access"),
]


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path_info.startswith("/api/"):  # /env/<env>/api/... too: the prefix is off path_info
        return api_not_found(request, exception)
    if isinstance(exception, Http404) and exception.args and isinstance(exception.args[0], str):
        # A page's own 404 says what is missing (a chain that only another environment has, say).
        return render(request, "404.html", {"message": exception.args[0]}, status=404)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    # A database outage raised outside a view (e.g. a middleware saving the session) is a
    # 503 too; views' outages are answered by DatabaseOutageMiddleware.
    if isinstance(sys.exc_info()[1], (OperationalError, InterfaceError)):
        return database_unavailable(request)
    if request.path_info.startswith("/api/"):
        return api_server_error(request)
    return defaults.server_error(request)
