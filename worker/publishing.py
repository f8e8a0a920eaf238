"""Celery tasks that publish the chains' signed documents to a static host and object storage
(presets/publishing.py); thin: each calls the publishing service and returns."""

from __future__ import annotations

from typing import Any

from presets import publishing
from presets.exceptions import NotFound
from worker.names import task


# Attempts are Celery's retries of this one task; the service decides when the next one comes
# and when to stop (PUBLISH_BACKOFF_SECONDS, PUBLISH_MAX_ATTEMPTS). The chain's document is
# read when the task runs, so a retry publishes what is current then.
@task(formerly="presets.tasks.publish_chain", bind=True, max_retries=None)
def publish_chain(self: Any, chain: str) -> int:
    """Publish the chain's current document to every target (queued when a change commits);
    retry with backoff while one fails. A target that held a document the control plane did not
    make gets the current one, and the service reports it (ERROR log, ``publish_forged`` alert,
    ``controlplane_publish_replaced_total``): the task succeeds. Returns how many targets were
    written."""
    try:
        outcomes = publishing.publish_chain(chain=chain)
    except NotFound:
        return 0
    except publishing.PublishFailed as failed:
        delay = publishing.retry_in(failed, attempts=self.request.retries + 1)
        if delay is None:
            return sum(outcome.written for outcome in failed.outcomes)
        raise self.retry(countdown=delay) from None
    return sum(outcome.written for outcome in outcomes)


@task(formerly="presets.tasks.publish_chains")
def publish_chains() -> int:
    """Publish every chain (beat: every PUBLISH_EVERY_SECONDS, when publishing is set up), so a
    publish lost on the way is made good. Returns how many documents were written."""
    return publishing.publish_chains().written
