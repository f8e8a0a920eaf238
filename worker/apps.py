from django.apps import AppConfig


class WorkerConfig(AppConfig):
    """The Celery tasks (beat's sweeps and the deliveries); an app so that every process
    registers them (no models)."""

    name = "worker"
    verbose_name = "Worker tasks"

    def ready(self) -> None:
        # The tasks registered in every process, not only in the worker (which finds them
        # itself): a web process queues the deliveries by name when a change commits.
        from worker import pins, publishing, tasks  # noqa: F401
