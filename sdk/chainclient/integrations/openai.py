"""Transports on the official ``openai`` library: chat completions, whole or streamed.

``pip install "chainclient[openai]"``::

    from openai import OpenAI
    from chainclient.integrations.openai import OpenAIChat

    chat = OpenAIChat(OpenAI())
    router = Router(client, transports={"openai": chat})   # chat.stream serves stream()
    router.complete({"messages": [{"role": "user", "content": "hi"}]})

A request is a dict of ``chat.completions.create()`` keyword arguments without ``model``,
``timeout`` and ``stream``, which the adapter sets from the step and the router. The
client's own retries are turned off (``with_options(max_retries=0)``): the router decides
what is tried next. How the library's failures become the router's errors (verified in
openai 3.60's ``_base_client.py``, ``_streaming.py`` and ``_exceptions.py``):

- ``APIStatusError`` (a 4xx or 5xx): ``ProviderError(status)``, its message naming the
  error's type and code, ``retry_after_s`` from ``Retry-After`` (or ``retry-after-ms``); a
  400 whose code is ``context_length_exceeded`` (or whose words name the context length):
  ``ContextLengthExceeded``; a 400 whose code is ``content_policy_violation`` (OpenAI) or
  ``content_filter`` (Azure OpenAI): ``ContentPolicyRefusal``;
- ``APITimeoutError`` and ``APIConnectionError``: by their ``httpx2`` cause, see
  ``chainclient.integrations._http``;
- a body or an event that is not JSON (``json.JSONDecodeError``, which the library lets
  out as is), ``APIResponseValidationError``, an answer of the wrong type: ProviderError
  ``"malformed answer: ..."``, with no status;
- an error object inside the stream (the library raises a plain ``APIError``):
  ``ProviderError(None)``;
- ``finish_reason: "content_filter"`` or a ``refusal`` from the model:
  ``ContentPolicyRefusal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
except ImportError as exc:  # pragma: no cover - tests run this in a subprocess without openai
    raise ImportError(
        'chainclient.integrations.openai needs the openai library: pip install "chainclient[openai]"'
    ) from exc

from chainclient.errors import ContentPolicyRefusal, ContextLengthExceeded, ProviderError, TransportError
from chainclient.integrations._chunk_streams import AsyncChunkStream, ChunkStream
from chainclient.integrations._http import (
    AsyncLibraryTransport,
    DrainingBody,
    LibraryTransport,
    decoding_failure,
    malformed,
    network_failure,
    request_arguments,
    retry_after_s,
)
from chainclient.receipts import Answer
from chainclient.types import Step

# OpenAI-compatible servers (vLLM, llama.cpp) say it in words rather than with the code.
_CONTEXT_LENGTH_WORDS = ("maximum context length", "context length", "context window")
# A 400 refusing the content: OpenAI's safety system, Azure OpenAI's content filter.
_CONTENT_POLICY_CODES = frozenset({"content_policy_violation", "content_filter"})


def provider_failure(exc: BaseException) -> TransportError | None:
    """The router's error for what the openai library raised; None for anything that is
    not a provider failure (a programming error: it propagates as it is)."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, openai.APIResponseValidationError):
        return malformed(f"the answer does not match the API's schema ({exc.message})")
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc)
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one too
        return network_failure(exc) or ProviderError(None, True, f"connection error ({_cause(exc)})")
    if isinstance(exc, openai.APIError):
        # A chunk carrying {"error": ...} mid-stream: the library raises a bare APIError,
        # with no status; the provider was answering, so the outcome is unknown.
        labels = " ".join(label for label in (exc.type, exc.code) if label)
        return ProviderError(None, True, f"error in the stream: {labels + ': ' if labels else ''}{exc.message}")
    failure = decoding_failure(exc) or network_failure(exc)
    if failure is not None:
        return failure
    if isinstance(exc, openai.OpenAIError):
        return ProviderError(None, True, f"{type(exc).__name__}: {exc}")
    return None


def _status_error(exc: openai.APIStatusError) -> TransportError:
    status = exc.status_code
    body = exc.body
    text = body.get("message") if isinstance(body, Mapping) else None
    if not isinstance(text, str) or not text:
        text = exc.message
    label = f"{exc.type} ({exc.code})" if exc.type and exc.code else exc.type or exc.code or type(exc).__name__
    message = f"{label}: {text}"
    if status == 400 and exc.code in _CONTENT_POLICY_CODES:
        return ContentPolicyRefusal(f"the provider refused the request on policy grounds ({message})")
    if status == 400 and (exc.code == "context_length_exceeded" or _names_context_length(text)):
        return ContextLengthExceeded(True, f"context length exceeded: {message}")
    return ProviderError(status, True, message, retry_after_s=retry_after_s(exc.response.headers))


def _names_context_length(text: str) -> bool:
    lowered = text.lower()
    return any(words in lowered for words in _CONTEXT_LENGTH_WORDS)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)


def _answer(completion: object, step: Step) -> Answer:
    """``completion`` as the router's Answer; a refusal or a malformed answer raises."""
    if not isinstance(completion, ChatCompletion):
        raise malformed(f"expected a chat.completion, got {type(completion).__name__}")
    # The library builds models without validating them: a field the body lacked is
    # simply missing, so read every one defensively.
    choices = getattr(completion, "choices", None)
    if not choices:
        raise malformed("a chat.completion without choices")
    for choice in choices:
        finish_reason = getattr(choice, "finish_reason", None)
        if finish_reason == "content_filter":
            raise ContentPolicyRefusal(
                "the provider's content filter stopped the answer (finish_reason content_filter)"
            )
        refusal = getattr(getattr(choice, "message", None), "refusal", None)
        if refusal:
            raise ContentPolicyRefusal(f"the model refused: {refusal}")
        if not finish_reason:
            raise malformed("a choice without a finish_reason")
    usage = getattr(completion, "usage", None)
    return Answer(
        completion,
        model_id=getattr(completion, "model", None) or step.model,
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
    )


def _stream_arguments(step: Step, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    arguments = request_arguments(request, model=step.model, timeout=timeout_s, stream=True)
    # Usage arrives in a last chunk only when asked for; the receipt wants it.
    arguments.setdefault("stream_options", {"include_usage": True})
    return arguments


class _ChatState:
    """What a chat completion stream has said so far."""

    terminal = "a chunk with a finish_reason"

    def __init__(self, model: str) -> None:
        self.model_id = model
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.complete = False

    def observe(self, chunk: ChatCompletionChunk) -> None:
        # Most chunks carry a piece of content and nothing else to act on: read them directly
        # (once per chunk), and anything else, or a field the library left unset (it builds
        # chunks without validating them: AttributeError), defensively.
        try:
            model, usage, choices = chunk.model, chunk.usage, chunk.choices
            for choice in choices or ():
                if choice.finish_reason or choice.delta.refusal:
                    break
            else:
                if model:
                    self.model_id = model
                if usage is None:
                    return
        except AttributeError:
            pass
        self._observe_defensively(chunk)

    def _observe_defensively(self, chunk: ChatCompletionChunk) -> None:
        model = getattr(chunk, "model", None)
        if model:
            self.model_id = model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.input_tokens = getattr(usage, "prompt_tokens", None)
            self.output_tokens = getattr(usage, "completion_tokens", None)
        for choice in getattr(chunk, "choices", None) or ():
            refusal = getattr(getattr(choice, "delta", None), "refusal", None)
            if refusal:
                raise ContentPolicyRefusal(f"the model refused: {refusal}")
            finish_reason = getattr(choice, "finish_reason", None)
            if finish_reason == "content_filter":
                raise ContentPolicyRefusal(
                    "the provider's content filter stopped the stream (finish_reason content_filter)"
                )
            if finish_reason:
                self.complete = True

    def text(self, chunk: ChatCompletionChunk) -> str:
        parts: list[str] = []
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            parts.append(getattr(delta, "content", None) or "")
            for call in getattr(delta, "tool_calls", None) or ():
                parts.append(getattr(getattr(call, "function", None), "arguments", None) or "")
            parts.append(getattr(getattr(delta, "function_call", None), "arguments", None) or "")
        return "".join(parts)


class OpenAIChatStream(ChunkStream[ChatCompletionChunk]):
    """A streamed chat completion for ``Router.stream``: yields the library's
    ``ChatCompletionChunk`` objects (the usage chunk too, whose ``text()`` is empty)."""

    def __init__(self, stream: openai.Stream[ChatCompletionChunk], model: str) -> None:
        state = _ChatState(model)
        # The library stops at [DONE] without reading the body's end: see DrainingBody.
        body = DrainingBody.install(stream.response, state)
        leave = body.leave if body is not None else None
        super().__init__(stream, stream.response, stream.close, state, provider_failure, leave=leave)


class AsyncOpenAIChatStream(AsyncChunkStream[ChatCompletionChunk]):
    """A streamed chat completion for ``AsyncRouter.stream``."""

    def __init__(self, stream: openai.AsyncStream[ChatCompletionChunk], model: str) -> None:
        super().__init__(stream, stream.close, _ChatState(model), provider_failure)


class OpenAIChat(LibraryTransport):
    """A transport for ``Router``: ``chat(step, request, timeout_s) -> Answer`` and
    ``chat.stream(step, request, timeout_s) -> OpenAIChatStream``."""

    failure = staticmethod(provider_failure)
    answer = staticmethod(_answer)
    stream_type = openai.Stream
    stream_class = OpenAIChatStream

    def __init__(self, client: openai.OpenAI) -> None:
        super().__init__(client)

    def create(self, **arguments: Any) -> Any:
        return self.client.chat.completions.create(**arguments)

    def stream_arguments(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        return _stream_arguments(step, request, timeout_s)


class AsyncOpenAIChat(AsyncLibraryTransport):
    """A transport for ``AsyncRouter``: ``await chat(step, request, timeout_s)`` and
    ``await chat.stream(step, request, timeout_s)``."""

    failure = staticmethod(provider_failure)
    answer = staticmethod(_answer)
    stream_type = openai.AsyncStream
    stream_class = AsyncOpenAIChatStream

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        super().__init__(client)

    async def create(self, **arguments: Any) -> Any:
        return await self.client.chat.completions.create(**arguments)

    def stream_arguments(self, step: Step, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        return _stream_arguments(step, request, timeout_s)


__all__ = [
    "AsyncOpenAIChat",
    "AsyncOpenAIChatStream",
    "OpenAIChat",
    "OpenAIChatStream",
    "provider_failure",
]
