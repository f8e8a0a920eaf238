"""The read path: how services get their chain documents, fast and always fresh.

``front`` (the ASGI callable answering token reads and long polls), ``snapshot`` (every
chain's encoded document in this process), ``notifications`` (a change's NOTIFY and the
LISTEN that applies it), ``tokens`` (the per-process token cache), ``counters`` (what this
process answered, for /metrics) and ``http`` (the HTTP rules the DRF API shares: error body,
ETag match, the ``wait`` parameter, the bearer header). Nothing here imports DRF.
"""
