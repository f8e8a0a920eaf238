"""chainclient: follow a control plane's live LLM fallback chain and route along it."""

from chainclient._version import __version__
from chainclient.admission import Contract
from chainclient.async_router import AsyncRouter, AsyncRouteStream
from chainclient.breaker import BreakerSettings
from chainclient.client import ChainClient
from chainclient.errors import (
    AllProvidersFailed,
    ChainClientError,
    ContentPolicyRefusal,
    ContentPolicyRejected,
    ContextLengthExceeded,
    DeadlineExceeded,
    NoEligibleRoute,
    OutcomeUnknown,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RequestRejected,
    RoutingError,
    StreamInterrupted,
    TransportError,
    VerificationFailed,
)
from chainclient.receipts import Answer, Attempt, CredentialAlert, Receipt, RouteResult
from chainclient.router import Router, RouteStream
from chainclient.transport import ControlPlaneConnection
from chainclient.types import (
    ChainDocument,
    DefaultChain,
    DocumentInvalid,
    DocumentSignature,
    FailurePolicy,
    Provider,
    Registry,
    Step,
)

__all__ = [
    "AllProvidersFailed",
    "Answer",
    "AsyncRouteStream",
    "AsyncRouter",
    "Attempt",
    "BreakerSettings",
    "ChainClient",
    "ChainClientError",
    "ChainDocument",
    "ContentPolicyRefusal",
    "ContextLengthExceeded",
    "ContentPolicyRejected",
    "Contract",
    "ControlPlaneConnection",
    "CredentialAlert",
    "DeadlineExceeded",
    "DefaultChain",
    "DocumentInvalid",
    "DocumentSignature",
    "FailurePolicy",
    "NoEligibleRoute",
    "OutcomeUnknown",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "Receipt",
    "Registry",
    "RequestRejected",
    "RouteResult",
    "RouteStream",
    "Router",
    "RoutingError",
    "Step",
    "StreamInterrupted",
    "TransportError",
    "VerificationFailed",
    "__version__",
]
