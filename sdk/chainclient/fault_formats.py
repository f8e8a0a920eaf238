"""The vendors' formats, as the fault provider writes them: OpenAI's chat completions and
Anthropic's messages, whole (a JSON document) or streamed (server-sent events), their error
bodies, and the usage both report.

Written from the vendors' public API documentation; ``fault_provider``'s docstring lists
what each format's answers and streams hold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from chainclient.fault_scenarios import Plan, Vendor


class VendorAnswer:
    """One answer in a vendor's format: the JSON document, or the stream's events."""

    def __init__(self, vendor: Vendor, plan: Plan, body: Mapping[str, Any], number: int) -> None:
        self.vendor = vendor
        self.plan = plan
        self.body = body
        requested = body.get("model")
        self.model = plan["model"] if plan.scenario == "wrong_model" else str(requested or "")
        self.refused = plan.scenario == "content_filter"
        self.count = 0 if self.refused else max(0, int(plan["chunks"]))
        self.input_tokens = prompt_tokens(body)
        self.number = number
        self.id = f"chatcmpl-fault-{number}" if vendor == "openai" else f"msg_fault_{number}"
        self.created = int(time.time())
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True

    def headers(self, content_type: str) -> list[tuple[str, str]]:
        request_id = "x-request-id" if self.vendor == "openai" else "request-id"
        return [("Content-Type", content_type), (request_id, f"req_fault_{self.number}")]

    def texts(self) -> list[str]:
        return [f"chunk-{index}" if index == 0 else f" chunk-{index}" for index in range(self.count)]

    def document(self) -> dict[str, Any]:
        text = "".join(self.texts())
        if self.vendor == "openai":
            return {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None if self.refused else text, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "content_filter" if self.refused else "stop",
                    }
                ],
                "usage": self._openai_usage(),
            }
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [] if self.refused else [{"type": "text", "text": text}],
            "stop_reason": "refusal" if self.refused else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.count},
        }

    def opening(self) -> list[bytes]:
        if self.vendor == "openai":
            return [self._chunk({"role": "assistant", "content": ""}, None)]
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
        }
        events = [sse("message_start", {"type": "message_start", "message": message})]
        if not self.refused:
            block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            events.append(sse("content_block_start", block))
        events.append(sse("ping", {"type": "ping"}))
        return events

    def pieces(self) -> list[bytes]:
        if self.vendor == "openai":
            return [self._chunk({"content": text}, None) for text in self.texts()]
        return [
            sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            )
            for text in self.texts()
        ]

    def closing(self) -> list[bytes]:
        if self.vendor == "openai":
            events = [self._chunk({}, "content_filter" if self.refused else "stop")]
            if self.include_usage:
                usage_chunk = self._chunk_document([], usage=self._openai_usage())
                events.append(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
            events.append(b"data: [DONE]\n\n")
            return events
        events = [] if self.refused else [sse("content_block_stop", {"type": "content_block_stop", "index": 0})]
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": "refusal" if self.refused else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": self.count},
        }
        events.append(sse("message_delta", delta))
        events.append(sse("message_stop", {"type": "message_stop"}))
        return events

    def error_event(self, kind: str) -> bytes:
        message = f"fault provider: {kind} mid-stream"
        if self.vendor == "openai":
            return b"data: " + json.dumps(error_body("openai", kind, message, None)).encode() + b"\n\n"
        return sse("error", error_body("anthropic", kind, message, None))

    def malformed_event(self) -> bytes:
        if self.vendor == "openai":
            return b'data: {"id": "chatcmpl-fault", "choices": [{"delta": \n\n'
        return b'event: message_start\ndata: {"type": "message_start", "message": \n\n'

    def _chunk(self, delta: Mapping[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}
        document = self._chunk_document([choice], usage=None)
        return b"data: " + json.dumps(document).encode() + b"\n\n"

    def _chunk_document(self, choices: list[dict[str, Any]], *, usage: Mapping[str, int] | None) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            # With include_usage every chunk carries the field; only the last has a value.
            document["usage"] = dict(usage) if usage is not None else None
        return document

    def _openai_usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.count,
            "total_tokens": self.input_tokens + self.count,
        }


# scenario -> vendor -> (error type, message, OpenAI error code)
ERRORS: Mapping[str, Mapping[Vendor, tuple[str, str, str | None]]] = {
    "rate_limited": {
        "openai": ("requests", "Rate limit reached for requests. Please try again in 1s.", "rate_limit_exceeded"),
        "anthropic": ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", None),
    },
    "server_error": {
        "openai": ("server_error", "The server had an error while processing your request.", None),
        "anthropic": ("api_error", "Internal server error", None),
    },
    "unavailable": {
        "openai": ("server_error", "The service is temporarily unavailable.", "service_unavailable"),
        "anthropic": ("api_error", "Service temporarily unavailable", None),
    },
    "overloaded": {
        "openai": ("overloaded_error", "Overloaded", None),
        "anthropic": ("overloaded_error", "Overloaded", None),
    },
    "unauthorized": {
        "openai": ("invalid_request_error", "Incorrect API key provided.", "invalid_api_key"),
        "anthropic": ("authentication_error", "invalid x-api-key", None),
    },
    "context_length": {
        "openai": (
            "invalid_request_error",
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130000 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        ),
        "anthropic": ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", None),
    },
    "content_policy_400": {
        "openai": (
            "invalid_request_error",
            "Your request was rejected as a result of our safety system.",
            "content_policy_violation",
        ),
        "anthropic": ("invalid_request_error", "Output blocked by content filtering policy", None),
    },
}


def error_body(vendor: Vendor, kind: str, message: str, code: str | None) -> dict[str, Any]:
    if vendor == "openai":
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return {"type": "error", "error": {"type": kind, "message": message}}


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The words in the request's messages (and Anthropic's ``system``), at least 1: a
    stand-in for a tokenizer that tests can predict."""
    texts: list[str] = []

    def collect(content: Any) -> None:
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])

    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            collect(message.get("content"))
    collect(body.get("system"))
    return max(1, sum(len(text.split()) for text in texts))


__all__ = ["ERRORS", "VendorAnswer", "error_body", "sse"]
