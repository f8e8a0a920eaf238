import os

from django.core.wsgi import get_wsgi_application

from controlplane import telemetry

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
telemetry.setup()  # when OTEL_* asks for traces; before Django builds its middleware
application = get_wsgi_application()
