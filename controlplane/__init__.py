# Load the Celery app with Django, so that @shared_task binds to it and tasks queued from the
# web process (alert deliveries) use the configured broker.
from controlplane.celery import app as celery_app

__all__ = ("celery_app",)
