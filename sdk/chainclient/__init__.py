"""chainclient: follow a control plane's live LLM fallback chain and route along it."""

from chainclient.types import ChainDocument, DocumentInvalid, Provider, Registry, Step

__version__ = "0.1.0"

__all__ = [
    "ChainDocument",
    "DocumentInvalid",
    "Provider",
    "Registry",
    "Step",
    "__version__",
]
