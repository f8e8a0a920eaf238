"""The production web application: the read front for chain reads, Django for the rest."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_application = get_asgi_application()

from presets.read_path.counters import prepare_multiprocess_dir  # noqa: E402
from presets.read_path.front import ReadFront  # noqa: E402 - needs Django set up first

prepare_multiprocess_dir()

application = ReadFront(django_application)
