"""Transports on the vendors' official libraries, and signature checks, as optional extras.

- ``chainclient.integrations.openai``: ``OpenAIChat`` and ``AsyncOpenAIChat`` on ``openai``
  (``pip install "chainclient[openai]"``);
- ``chainclient.integrations.anthropic``: ``AnthropicMessages`` and
  ``AsyncAnthropicMessages`` on ``anthropic`` (``pip install "chainclient[anthropic]"``);
- ``chainclient.integrations.verify``: Ed25519 on ``cryptography``, what checks a chain
  document's signature (``pip install "chainclient[verify]"``); loaded by the client itself
  when given ``trusted_keys``, never imported by hand.

Each adapter is a transport for ``Router.complete`` (``adapter(step, request, timeout_s)``)
and, through its ``stream`` method, for ``Router.stream``; it turns every failure the
library reports into the ``chainclient.errors`` the router classifies (the tables are in
the SDK's README, "Provider libraries"). The core SDK imports nothing of this package but
``verify``, and that only for a client given ``trusted_keys``, so it stays standard-library
only; importing a module here without its library raises ImportError saying which extra to
install.
"""
