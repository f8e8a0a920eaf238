"""The baseline for bench/read_throughput.py: a bare Django view returning a constant.

Run under a WSGI server, e.g. `granian --interface wsgi bench.bare_django:application`.
"""

import django
from django.conf import settings
from django.http import HttpResponse
from django.urls import path

DOCUMENT = (
    b'{"name":"chat","version":1,"preset":"normal","is_default":true,"chain":[{"provider":'
    b'"vendor_a","model":"large","timeout_ms":20000}],"marking":{"degraded":false,"note":""},'
    b'"updated_by":"system:sync","reason":"bench","updated_at":"2026-11-29T02:03:04Z",'
    b'"expires_at":null}'
)


def constant(request):  # type: ignore[no-untyped-def]
    return HttpResponse(DOCUMENT, content_type="application/json")


settings.configure(
    DEBUG=False,
    SECRET_KEY="bench-only",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
)
django.setup()
urlpatterns = [path("api/v1/chains/chat", constant)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
