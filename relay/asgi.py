"""The relay's application as granian imports it in each worker process (``python -m relay``)."""

from __future__ import annotations

import logging
import os

from relay.app import Relay
from relay.config import from_env

logging.basicConfig(
    level=os.environ.get("RELAY_LOG_LEVEL", "INFO").upper(),
    format="%(asctime)s %(levelname)s %(name)s %(message)s",
)
application = Relay(from_env())
