"""The Celery app (``celery -A controlplane worker --beat``): configured from Django's
settings (``CELERY_*``), tasks found in each app's ``tasks`` module, beat schedule in
``settings.CELERY_BEAT_SCHEDULE``."""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from controlplane import celery_metrics  # noqa: F401 - task counts and durations for /metrics
from controlplane.telemetry import trace_worker_processes

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
trace_worker_processes()  # when OTEL_* asks for traces: each worker process, after its fork


@app.on_after_configure.connect
def _make_folders(sender: Celery, **kwargs: object) -> None:
    # kombu's filesystem transport (the no-server default) expects its folders to exist;
    # the web process (which queues alert deliveries) and the worker both need them. Beat
    # keeps its schedule file under var/ too.
    folders = [Path(sender.conf.beat_schedule_filename).parent]
    if str(sender.conf.broker_url).startswith("filesystem://"):
        options = sender.conf.broker_transport_options or {}
        folders += [
            Path(options[key])
            for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")
            if key in options
        ]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
