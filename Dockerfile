# The control plane's image: one image for web, worker, beat and the release step.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 VAR_DIR=/var/lib/controlplane STATIC_ROOT=/app/static
WORKDIR /app
RUN useradd --system --home-dir /app controlplane \
    && mkdir -p /var/lib/controlplane && chown controlplane /var/lib/controlplane
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN python manage.py collectstatic --no-input -v0
USER controlplane
EXPOSE 8000
CMD ["granian", "--interface", "asgi", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", \
     "--no-ws", "--respawn-failed-workers", "--static-path-route", "/static", \
     "--static-path-mount", "/app/static", "controlplane.asgi:application"]
