"""``GET /api/v1/history``: every chain's changes, oldest first, streamed as NDJSON (one
history entry a line, as the per-chain history API's entries), filtered like the history
pages and resumable after any entry (``presets/history_export.py``; docs/audit-export.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from dataclasses import replace
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from audit import spend
from http_api.environments import environment_of
from http_api.schema import errors, serializer_for
from presets.exceptions import InvalidInput
from presets.history_export import NDJSON_MEDIA_TYPE, export_entries, ndjson_lines, start_export
from presets.history_filter import FILTER_PARAMETERS, filter_from
from presets.models import Action

PARAMETERS = (*FILTER_PARAMETERS, "after")
TIME_HELP = (
    "UTC: a date (2026-11-30), a minute (2026-11-30T02:00) or an instant (2026-11-30T02:00:30Z); "
    "an ISO offset is honoured"
)


class NdjsonRenderer(JSONRenderer):
    """For a client that accepts only NDJSON: an error is its one JSON object, on one line."""

    media_type = NDJSON_MEDIA_TYPE
    format = "ndjson"


class HistoryExportView(APIView):
    renderer_classes = [JSONRenderer, NdjsonRenderer]
    OutputSerializer = serializer_for(spend.ExportedChange, "HistoryExportEntrySerializer")

    @extend_schema(
        operation_id="history_export",
        description=(
            "Every chain's changes, oldest first (by when each was written, then the order written), "
            "as NDJSON: one history entry a line, the fields of GET /api/v1/chains/{name}/history's "
            "entries. Streamed; ends at the changes made HISTORY_EXPORT_SETTLE_SECONDS before the "
            "request. To continue, send the same filters with after=<chain_name>:<version> of the "
            "last line received."
        ),
        parameters=[
            OpenApiParameter("chain", str, description="only this chain's changes"),
            OpenApiParameter("actor", str, description="only changes by this actor (alice, token:NAME, system:expiry)"),
            OpenApiParameter("action", str, enum=Action.values, description="only changes of this action"),
            OpenApiParameter("since", str, description=f"changes written at or after this time; {TIME_HELP}"),
            OpenApiParameter("until", str, description=f"changes written up to the end of this time; {TIME_HELP}"),
            OpenApiParameter(
                "after", str, description="continue after this entry: its chain_name:version, e.g. chat:7"
            ),
        ],
        responses={
            (200, NDJSON_MEDIA_TYPE): OpenApiResponse(OutputSerializer, description="one history entry a line"),
            **errors(400, 401, 403, 503),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        params = _parameters(request)
        filters = replace(filter_from(params), environment=environment_of(request, params.get("chain") or None))
        export = start_export(filters=filters, after=params.get("after"))
        # Each change with the chain's spend around it (``audit.spend.around_changes``).
        chunks = (ndjson_lines(spend.around_changes(entries)).encode() for entries in export_entries(export))
        return StreamingHttpResponse(
            _served(request, chunks), content_type=NDJSON_MEDIA_TYPE, headers={"Cache-Control": "no-store"}
        )


def _parameters(request: Request) -> dict[str, str]:
    """The query, each parameter known and given once: a misspelt filter is an error, not an
    export of everything."""
    given = request.query_params
    for name in given:
        if name not in PARAMETERS:
            raise InvalidInput(name, f"is not a parameter of the history export: use {', '.join(PARAMETERS)}")
        if len(given.getlist(name)) > 1:
            raise InvalidInput(name, "is given more than once: give it once")
    return {name: given[name] for name in given}


def _served(request: Request, chunks: Generator[bytes]) -> Any:
    """The chunks as the server takes them one at a time. Django's ASGI handler would read a
    plain iterator whole into memory before sending a byte (it cannot run one in the event
    loop), so under ASGI each chunk is made by the request's own thread while the last one
    is being sent; under WSGI the server iterates the chunks itself."""
    if isinstance(request._request, ASGIRequest):
        return _from_request_thread(chunks)
    return chunks


async def _from_request_thread(chunks: Generator[bytes]) -> AsyncIterator[bytes]:
    # thread_sensitive: the thread that ran the view (Django's per-request thread under ASGI),
    # with its database connection.
    step = sync_to_async(_next, thread_sensitive=True)
    try:
        while (chunk := await step(chunks)) is not None:
            yield chunk
    finally:
        await sync_to_async(chunks.close, thread_sensitive=True)()


def _next(chunks: Generator[bytes]) -> bytes | None:
    return next(chunks, None)
