"""The relay: a read-only copy of the control plane's read API near the services, with no database.

It follows its upstream (the control plane, or another relay) with one long poll per chain,
keeps each document on disk exactly as it was signed, and answers the SDK's reads (200/304,
long polls) from memory. It checks service tokens against its upstream with a short cache,
sends usage reports and who read what (fleet status) upstream, and when the upstream is down
serves what it has, marked stale. It cannot change a document: services verify the control
plane's signature.

``config`` (its settings, from the environment), ``disk`` (documents and token verdicts on
disk), ``upstream`` (the HTTP client that follows the upstream and sends reports), ``app``
(the ASGI application), ``asgi`` (the application as granian imports it), ``__main__``
(``python -m relay``).
"""
