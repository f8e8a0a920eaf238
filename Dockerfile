# The control plane's image: one image for web, worker, beat and the release step.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VAR_DIR=/var/lib/controlplane STATIC_ROOT=/app/static
# granian's allocator (jemalloc, built into its extension) as `make serve` sets it (Makefile,
# WEB_MALLOC_CONF): freed pages back at once. Read by granian alone.
ENV _RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0
WORKDIR /app
RUN useradd --system --home-dir /app controlplane \
    && mkdir -p /var/lib/controlplane && chown controlplane /var/lib/controlplane
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# The settings refuse to load without a strong SECRET_KEY: collecting static files gets a
# throwaway one that is kept nowhere (each deployment sets its own at run time).
RUN SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    python manage.py collectstatic --no-input -v0
USER controlplane
EXPOSE 8000
# The web process with docker-compose.yml's defaults; compose gives each service its command
# (release, web, worker, beat). Beat's schedule file is VAR_DIR/celerybeat-schedule; no health
# check reads a file (beat and the worker answer `celery inspect ping`, web /readyz).
CMD ["granian", "--interface", "asgi", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", \
     "--http", "1", "--no-ws", "--respawn-failed-workers", "--backlog", "20480", "--backpressure", "20480", \
     "--static-path-route", "/static", "--static-path-mount", "/app/static", \
     "controlplane.asgi:application"]
