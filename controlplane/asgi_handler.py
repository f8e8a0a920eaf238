"""Django's ASGI handler, running each request's middleware and view as its WSGI handler does:
in one thread, entered once, and a thread kept for the next request.

Django's own ASGI handler builds an asynchronous middleware chain. Every synchronous
middleware, the view, each ``process_view`` and the exception handling are then adapted one by
one (``sync_to_async`` and back): an API write crosses between the event loop and its thread
about ten times, each crossing waiting for a loop busy with other requests. And it starts a new
thread for every request (a ``ThreadSensitiveContext`` without an executor), which costs more
CPU than the crossings. Measured on ``/healthz`` with 4 requests at a time in one process:
1.2-1.7 ms of CPU per request for Django's handler, 0.5-0.8 ms for this one (bench/README.md,
"Select latency").

This handler builds the synchronous chain (Django's WSGI handler's, the one the WSGI entry
point and the test client run) and runs it in the request's thread in one call; reading the
body, sending the answer, the request signals, streaming (``http_api.history`` steps its
generator in the request's thread) and a client's disconnect stay Django's. The request's
thread is one kept from an earlier request, as WSGI servers keep theirs (Django keeps what a
request sets in context variables, asgiref's ``Local``, not in the thread).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.http import FileResponse, HttpRequest, HttpResponseBase

# Idle request threads kept per process; a burst above it starts threads that end after it.
IDLE_THREADS_MAX = 32

# Recent asgiref lets a ThreadSensitiveContext run on a given executor; with an older one every
# request gets a new thread, as with Django's handler.
_REUSES_THREADS = "executor" in inspect.signature(ThreadSensitiveContext).parameters


class OneHopASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)  # the synchronous chain, as for WSGI
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or not _REUSES_THREADS:
            await super().__call__(scope, receive, send)  # Django's (and its refusal of non-HTTP)
            return
        executor = self._idle.pop() if self._idle else ThreadPoolExecutor(1, thread_name_prefix="request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            # Idle now: Django waits for its tasks, and asgiref for a call running in the
            # thread even when the client left (a thread cannot be stopped).
            if len(self._idle) < IDLE_THREADS_MAX:
                self._idle.append(executor)
            else:
                executor.shutdown(wait=False)

    async def run_get_response(self, request: HttpRequest) -> HttpResponseBase:
        # thread_sensitive: the request's own thread, where its database connection lives and
        # where Django closes the response (request_finished).
        response = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        response._handler_class = self.__class__  # type: ignore[attr-defined]
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        return response
