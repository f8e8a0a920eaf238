"""Transports on the vendors' official libraries, as optional extras.

- ``chainclient.integrations.openai``: ``OpenAIChat`` and ``AsyncOpenAIChat`` on ``openai``
  (``pip install "chainclient[openai]"``);
- ``chainclient.integrations.anthropic``: ``AnthropicMessages`` and
  ``AsyncAnthropicMessages`` on ``anthropic`` (``pip install "chainclient[anthropic]"``).

Each adapter is a transport for ``Router.complete`` (``adapter(step, request, timeout_s)``)
and, through its ``stream`` method, for ``Router.stream``; it turns every failure the
library reports into the ``chainclient.errors`` the router classifies (the tables are in
the SDK's README, "Provider libraries"). The core SDK never imports this package, so it
stays standard-library only; importing an adapter without its library raises ImportError
saying which extra to install.
"""
