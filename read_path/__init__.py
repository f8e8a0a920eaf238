"""The read path: how services get their chain documents, fast and always fresh.

``front`` (the ASGI callable answering token reads and long polls), ``snapshot`` (every
chain's encoded document in this process), ``notifications`` (a change's NOTIFY and the
LISTEN that applies it), ``worker_threads`` (database work off the event loop), ``tokens``
(the per-process live tokens), ``counters`` (what this process answered, for /metrics),
``request_context`` (the request id, routes as URL patterns, the access line; Django's
middleware shares them) and ``http`` (the HTTP rules the DRF API shares: error body, ETag
match, the ``wait`` parameter, the bearer header). ``held`` (the documents held for the wire
and the long polls on them) and ``answers`` (the answers on the wire, the plain read's fast
path included) are the relay's too: they, ``http`` and ``request_ids`` import no Django.
Nothing here imports DRF.
"""
