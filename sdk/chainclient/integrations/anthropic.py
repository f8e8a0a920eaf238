"""Transports on the official ``anthropic`` library: messages, whole or streamed.

``pip install "chainclient[anthropic]"``::

    from anthropic import Anthropic
    from chainclient.integrations.anthropic import AnthropicMessages

    messages = AnthropicMessages(Anthropic())
    router = Router(client, transports={"anthropic": messages})   # .stream serves stream()
    router.complete({"max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]})

A request is a dict of ``messages.create()`` keyword arguments without ``model``,
``timeout`` and ``stream``, which the adapter sets from the step and the router. The
client's own retries are turned off (``with_options(max_retries=0)``): the router decides
what is tried next. How the library's failures become the router's errors (verified in
anthropic 2.16's ``_base_client.py``, ``_streaming.py`` and ``_exceptions.py``):

- ``APIStatusError`` (a 4xx or 5xx, 529 ``OverloadedError`` included): ``ProviderError``
  with that status, its message naming the error's type, ``retry_after_s`` from
  ``Retry-After``; a 400 "prompt is too long": ``ContextLengthExceeded``; a 400 "blocked by
  content filtering policy": ``ContentPolicyRefusal``;
- an ``error`` event mid-stream: the library raises an ``APIStatusError`` carrying the
  stream's own status (200), so the status is the one the error's type implies
  (``overloaded_error`` 529, ``api_error`` 500, ``rate_limit_error`` 429, ...);
- ``APITimeoutError`` and ``APIConnectionError`` before the headers, and the bare
  ``httpx2`` errors the library lets out of a stream (it does not wrap them there): by
  their ``httpx2`` cause, see ``chainclient.integrations._http``;
- a body or an event that is not JSON, ``APIResponseValidationError``, an answer of the
  wrong type: ProviderError ``"malformed answer: ..."``, with no status;
- ``stop_reason: "refusal"``: ``ContentPolicyRefusal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import anthropic
    from anthropic.types import Message, RawMessageStreamEvent
except ImportError as exc:  # pragma: no cover - tests run this in a subprocess without anthropic
    raise ImportError(
        'chainclient.integrations.anthropic needs the anthropic library: pip install "chainclient[anthropic]"'
    ) from exc

from chainclient.errors import ContentPolicyRefusal, ContextLengthExceeded, ProviderError, TransportError
from chainclient.integrations._chunk_streams import AsyncChunkStream, ChunkStream
from chainclient.integrations._http import (
    AsyncLibraryTransport,
    LibraryTransport,
    decoding_failure,
    malformed,
    network_failure,
    retry_after_s,
)
from chainclient.receipts import Answer
from chainclient.types import Step

ERROR_TYPE_STATUSES: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status each of Anthropic's documented error types comes with: what an ``error``
event in a stream (whose own status was 200) stands for."""


def provider_failure(exc: BaseException) -> TransportError | None:
    """The router's error for what the anthropic library raised; None for anything that is
    not a provider failure (a programming error: it propagates as it is)."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, anthropic.APIResponseValidationError):
        return malformed(f"the answer does not match the API's schema ({exc.message})")
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, anthropic.APIConnectionError):  # APITimeoutError is one too
        # The library wraps *any* exception from sending in APIConnectionError; without an
        # httpx2 cause nobody knows whether the request left.
        return network_failure(exc) or ProviderError(None, True, f"connection error ({_cause(exc)})")
    failure = decoding_failure(exc) or network_failure(exc)
    if failure is not None:
        return failure
    if isinstance(exc, anthropic.CredentialsError):
        # Raised while building the request's credentials: nothing was sent.
        return ProviderError(None, False, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, anthropic.AnthropicError):
        return ProviderError(None, True, f"{type(exc).__name__}: {exc}")
    return None


def _status_error(exc: anthropic.APIStatusError) -> TransportError:
    kind = exc.type or ""
    status: int | None = exc.status_code
    headers: Mapping[str, str] = exc.response.headers
    if status is None or status < 400:
        # An error event inside a stream that started 200: the event's type says which.
        status = ERROR_TYPE_STATUSES.get(kind)
        headers = {}
    text = exc.api_message or exc.message
    message = f"{kind or type(exc).__name__}: {text}"
    if status == 400 and "content filtering policy" in text.lower():
        return ContentPolicyRefusal(f"the provider refused the request on policy grounds ({message})")
    if status == 400 and "prompt is too long" in text.lower():
        return ContextLengthExceeded(True, f"context length exceeded: {message}")
    return ProviderError(status, True, message, retry_after_s=retry_after_s(headers))


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def _answer(message: object, step: Step) -> Answer:
    """``message`` as the router's Answer; a refusal or a malformed answer raises."""
    if not isinstance(message, Message):
        raise malformed(f"expected a message, got {type(message).__name__}")
    # The library builds models without validating them: read every field defensively.
    stop_reason = getattr(message, "stop_reason", None)
    if stop_reason == "refusal":
        raise ContentPolicyRefusal("the model refused on policy grounds (stop_reason refusal)")
    if not stop_reason:
        raise malformed("a message without a stop_reason")
    usage = getattr(message, "usage", None)
    return Answer(
        message,
        model_id=getattr(message, "model", None) or step.model,
        input_tokens=getattr(usage, "input_tokens", None),
        output_tokens=getattr(usage, "output_tokens", None),
    )


class _MessageState:
    """What a message stream has said so far (the library drops ``ping`` events itself)."""

    terminal = "message_stop"

    def __init__(self, model: str) -> None:
        self.model_id = model
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.complete = False

    def observe(self, event: RawMessageStreamEvent) -> None:
        kind = getattr(event, "type", None)
        if kind == "content_block_delta":
            return  # most of a stream, and nothing to learn from: asked first
        if kind == "message_start":
            message = getattr(event, "message", None)
            self.model_id = getattr(message, "model", None) or self.model_id
            usage = getattr(message, "usage", None)
            self.input_tokens = getattr(usage, "input_tokens", None)
            self.output_tokens = getattr(usage, "output_tokens", None)
        elif kind == "message_delta":
            if getattr(getattr(event, "delta", None), "stop_reason", None) == "refusal":
                raise ContentPolicyRefusal("the model refused on policy grounds (stop_reason refusal)")
            usage = getattr(event, "usage", None)
            # Cumulative counts: the last message_delta has the totals.
            output_tokens = getattr(usage, "output_tokens", None)
            if output_tokens is not None:
                self.output_tokens = output_tokens
            input_tokens = getattr(usage, "input_tokens", None)
            if input_tokens is not None:
                self.input_tokens = input_tokens
        elif kind == "message_stop":
            self.complete = True

    def text(self, event: RawMessageStreamEvent) -> str:
        if getattr(event, "type", None) != "content_block_delta":
            return ""
        delta = getattr(event, "delta", None)
        for field in ("text", "partial_json", "thinking"):
            value = getattr(delta, field, None)
            if isinstance(value, str):
                return value
        return ""


class AnthropicMessageStream(ChunkStream[RawMessageStreamEvent]):
    """A streamed message for ``Router.stream``: yields the library's raw stream events
    (``message_start``, ``content_block_delta``, ...; never ``ping``, which it drops)."""

    def __init__(self, stream: anthropic.Stream[RawMessageStreamEvent], model: str) -> None:
        super().__init__(stream, stream.response, stream.close, _MessageState(model), provider_failure)


class AsyncAnthropicMessageStream(AsyncChunkStream[RawMessageStreamEvent]):
    """A streamed message for ``AsyncRouter.stream``."""

    def __init__(self, stream: anthropic.AsyncStream[RawMessageStreamEvent], model: str) -> None:
        super().__init__(stream, stream.close, _MessageState(model), provider_failure)


class AnthropicMessages(LibraryTransport):
    """A transport for ``Router``: ``messages(step, request, timeout_s) -> Answer`` and
    ``messages.stream(step, request, timeout_s) -> AnthropicMessageStream``."""

    failure = staticmethod(provider_failure)
    answer = staticmethod(_answer)
    stream_type = anthropic.Stream
    stream_class = AnthropicMessageStream

    def __init__(self, client: anthropic.Anthropic) -> None:
        super().__init__(client)

    def create(self, **arguments: Any) -> Any:
        return self.client.messages.create(**arguments)


class AsyncAnthropicMessages(AsyncLibraryTransport):
    """A transport for ``AsyncRouter``: ``await messages(step, request, timeout_s)`` and
    ``await messages.stream(step, request, timeout_s)``."""

    failure = staticmethod(provider_failure)
    answer = staticmethod(_answer)
    stream_type = anthropic.AsyncStream
    stream_class = AsyncAnthropicMessageStream

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        super().__init__(client)

    async def create(self, **arguments: Any) -> Any:
        return await self.client.messages.create(**arguments)


__all__ = [
    "ERROR_TYPE_STATUSES",
    "AnthropicMessageStream",
    "AnthropicMessages",
    "AsyncAnthropicMessageStream",
    "AsyncAnthropicMessages",
    "provider_failure",
]
