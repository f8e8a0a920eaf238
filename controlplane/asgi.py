"""The production web application: the read front for chain reads, Django for the rest."""

import gc
import os

import django

from controlplane import telemetry

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
telemetry.setup()  # when OTEL_* asks for traces; before Django builds its middleware
django.setup(set_prefix=False)  # what get_asgi_application() does, with the handler below

from controlplane.asgi_handler import OneHopASGIHandler  # noqa: E402

# Django's ASGI handler with the synchronous middleware chain run in one thread hop (see there).
django_application = OneHopASGIHandler()

from controlplane import pool_metrics  # noqa: E402
from read_path.counters import prepare_multiprocess_dir  # noqa: E402
from read_path.front import ReadFront  # noqa: E402 - needs Django set up first

prepare_multiprocess_dir()

# Once a second with its own figures, the front writes this process's database pool use.
application = telemetry.trace_front(ReadFront(django_application, on_flush=[pool_metrics.record]))

# Everything loaded so far (Django, the apps, the URLconf and what it imports) lives as long as
# the process: keep it out of the garbage collector's full collections, which otherwise scan
# it again and again and pause the process for tens of milliseconds while thousands of long
# polls are held (bench/long_polls.py).
import controlplane.urls  # noqa: E402, F401 - its views, loaded now rather than by the first request

gc.collect()
gc.freeze()
# What each held long poll keeps (its coroutine, futures and callbacks) lives until it is
# answered, and the next poll makes as much again: at 700 allocations a young collection, the
# collector ran many times per change and its older generations scanned every held poll, ~40 %
# of a worker's CPU per answer with 2,000 polls held (bench/README.md, "Long polls"). So the
# older generations are collected once a million allocations (the middle one) and a hundred
# times less often (the oldest). The young one is collected every 3,000: a request's cycles
# (Django's and DRF's request, response and parsers, ~150 objects a change) are garbage by
# then, and a young collection takes as long as the garbage it frees: at 50,000 it paused the
# worker, every request in it, for 30-140 ms every few seconds of writes; at 3,000 a pause is
# 4 ms (p90), with no more collector time in all (bench/README.md, "Select latency").
gc.set_threshold(3_000, 333, 100)
