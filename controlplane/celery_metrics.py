"""Celery task metrics: how many tasks ran, how long each took, by task name and outcome.

``controlplane_celery_task_duration_seconds{task, outcome}`` (a histogram: its ``_count`` is
the number of tasks) is written by each worker process to prometheus_client's multiprocess
files in ``PROMETHEUS_MULTIPROC_DIR``; ``outcome`` is the task's final state in lower case
(``success``, ``failure``, ``retry``, ...). Those files reach a scrape in one of two ways:

- The worker shares the web processes' directory (``make run``: both use
  VAR_DIR/prometheus): the web's ``GET /metrics`` shows them.
- The worker has a directory of its own (a container: files are named by process id, which
  would collide across containers, so each has its own): with ``CELERY_METRICS_PORT`` set,
  the worker's main process serves them at ``http://<worker>:<port>/metrics`` (the same
  ``METRICS_TOKEN`` applies). Scrape every worker container there.

Nothing here imports prometheus_client when this module is imported: the Celery app (and so
this module) is imported with ``controlplane`` itself, before the settings have put
``PROMETHEUS_MULTIPROC_DIR`` in the environment, and prometheus_client picks multiprocess
mode once, when it is first imported.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from functools import cache
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from celery.signals import task_postrun, task_prerun, worker_init, worker_ready

if TYPE_CHECKING:
    from prometheus_client import Histogram

log = logging.getLogger(__name__)

# Most tasks are sweeps and deliveries of well under a second; a webhook may take its timeout.
TASK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# task id -> perf_counter() at its start, in the process running it.
_started: dict[str, float] = {}


@cache
def task_duration() -> Histogram:
    from prometheus_client import Histogram  # noqa: PLC0415 - see the module's docstring

    return Histogram(
        "controlplane_celery_task_duration_seconds",
        "Celery tasks run, by task name and outcome (success, failure, retry, ...), and how long each took",
        ["task", "outcome"],
        buckets=TASK_BUCKETS,
        registry=None,
    )


@task_prerun.connect
def _task_started(task_id: str | None = None, **kwargs: Any) -> None:
    if task_id is not None:
        _started[task_id] = time.perf_counter()


@task_postrun.connect
def _task_ended(task_id: str | None = None, task: Any = None, state: str | None = None, **kwargs: Any) -> None:
    started = _started.pop(task_id, None) if task_id is not None else None
    if started is None or task is None:
        return
    try:
        task_duration().labels(task.name, (state or "unknown").lower()).observe(time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - metrics must never fail a task
        log.warning("celery metrics: task %s not recorded: %s", task.name, exc)


@worker_init.connect
def _prepare_directory(**kwargs: Any) -> None:
    # Before the pool starts: files of processes gone since an earlier worker are removed
    # (read_path.counters.prepare_multiprocess_dir, as the web processes do).
    from read_path.counters import prepare_multiprocess_dir  # noqa: PLC0415 - needs Django set up

    prepare_multiprocess_dir()


@worker_ready.connect
def _serve_metrics(**kwargs: Any) -> None:
    from django.conf import settings  # noqa: PLC0415 - needs Django set up

    if settings.CELERY_METRICS_PORT:
        serve(settings.CELERY_METRICS_PORT, directory=settings.PROMETHEUS_MULTIPROC_DIR, token=settings.METRICS_TOKEN)


def serve(port: int, *, directory: str, token: str = "", address: str = "0.0.0.0") -> WSGIServer | None:  # noqa: S104 - Prometheus scrapes from another container
    """Serve ``GET /metrics`` (the multiprocess files in ``directory``) on ``port`` from a
    daemon thread of this process; with ``token``, only for ``Authorization: Bearer <token>``.
    A port that cannot be bound is logged, and the worker goes on working without it."""
    try:
        server = make_server(address, port, _metrics_app(directory, token), handler_class=_QuietHandler)
    except OSError as exc:
        log.error("celery metrics: cannot serve on port %s (%s); the worker goes on without it", port, exc)
        return None
    threading.Thread(target=server.serve_forever, name="celery-metrics", daemon=True).start()
    log.info("celery metrics: serving http://%s:%s/metrics", address, port)
    return server


def _metrics_app(directory: str, token: str) -> WSGIApplication:
    from prometheus_client import CollectorRegistry, make_wsgi_app  # noqa: PLC0415 - see the module's docstring
    from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415

    from read_path.http import bearer_token  # noqa: PLC0415 - needs Django set up

    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=directory)
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes] | Any:
        if token:
            raw = bearer_token(environ.get("HTTP_AUTHORIZATION"))
            if raw is None or not hmac.compare_digest(raw.encode(), token.encode()):
                start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
                return [b"metrics need 'Authorization: Bearer <METRICS_TOKEN>'\n"]
        return metrics(environ, start_response)

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # one line per scrape would be noise
        pass
