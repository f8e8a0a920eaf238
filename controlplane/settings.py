"""The control plane's one settings file: every knob is an environment variable with a safe default.

Bad values fail at start with a message naming the variable and what it accepts.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use true or false")


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = "" if maximum is None else f" and at most {maximum}"
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}{upper}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env_bool("REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set (a long random string)")
    # A per-checkout key keeps local runs and tests working without configuration; deployments
    # set SECRET_KEY (docker-compose.yml requires it).
    SECRET_KEY = "insecure-local-only-" + str(BASE_DIR)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A form older than its person's last sign-in fails the check: say so in the site's layout.
CSRF_FAILURE_VIEW = "presets.web.errors.csrf_failure"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "simple_history",
    "axes",
    "presets",
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "controlplane.database_outage.DatabaseOutageMiddleware",
    "controlplane.query_string.RefuseUnstorableQueryMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controlplane.security_headers.ContentSecurityPolicyMiddleware",
    # Last, as django-axes requires: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "presets.web.context_processors.open_alerts",
            ],
        },
    },
]
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'controlplane.sqlite3'}")
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
except ValueError as exc:
    raise ImproperlyConfigured(
        f"DATABASE_URL is not a database URL ({exc}); "
        "use e.g. postgres://user@host:5432/name or sqlite:////path/db.sqlite3"
    ) from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writers wait for each other instead of failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
else:
    # libpq and psycopg treat a connect_timeout below 2 as 2: a database host that accepts
    # connections but never answers costs a request 2 s before its 503; a stopped server or
    # a refused port answers at once.
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = env_int(
        "DATABASE_CONNECT_TIMEOUT", 1, minimum=1
    )
    # Each process holds at most DATABASE_POOL_MAX_SIZE connections (psycopg_pool through
    # Django), whatever the number of concurrent requests: under ASGI every request runs in a
    # thread of its own, and persistent per-thread connections ran PostgreSQL out of them.
    # A request finding the pool busy waits up to DATABASE_POOL_TIMEOUT seconds for one.
    # Connections at most = web processes x (pool + 1 LISTEN) + worker processes x pool
    # (README: "Database connections"). 0 turns pooling off (a connection per request).
    DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 8, minimum=0, maximum=1000)
    if DATABASE_POOL_MAX_SIZE:
        # Django's backend, with requests failing at once while PostgreSQL is down.
        DATABASES["default"]["ENGINE"] = "controlplane.postgresql"
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": min(env_int("DATABASE_POOL_MIN_SIZE", 1, minimum=0), DATABASE_POOL_MAX_SIZE),
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 5, minimum=1, maximum=600),
        }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # With a pool this checks each connection as it is handed out, so a database restart
    # costs no request an error (the pool replaces connections the server closed).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# --- Sign-in throttling (django-axes) ----------------------------------------------------
# Failures are counted per (username, client address) in the database, so every web process
# sees the same count, and one attacker cannot lock a person out from everywhere. The lock
# lifts by itself after LOGIN_LOCKOUT_MINUTES; an admin can lift it at once with
# `manage.py axes_reset_username NAME`.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A fixed window the lockout page can state; retrying while locked does not extend it.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "controlplane.login_lockout.lockout_response"

# --- HTTPS and browser protections -------------------------------------------------------
# HTTPS=true (set in docker-compose.yml) is for a deployment behind a TLS-terminating proxy
# that sets X-Forwarded-Proto: it redirects plain http to https, marks cookies Secure and
# sends HSTS. The default (false) keeps `make run` working on plain http://localhost.
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
# Probes and the scraper talk plain http to the container from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", HTTPS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# includeSubDomains and preload bind every other host of the domain, which this service does
# not own: they are the operator's decision, so their deploy-check warnings are silenced
# unless the operator turns them on.
SILENCED_SYSTEM_CHECKS = [
    *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),
    *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),
]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# The pages load their one script and one stylesheet from /static and have no inline code.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = env_str("STATIC_ROOT", str(VAR_DIR / "static"))

# --- The product's own knobs ------------------------------------------------------------
PRESETS_FILE = env_str("PRESETS_FILE", str(BASE_DIR / "presets" / "presets.example.json"))
PROVIDER_REGISTRY = env_str("PROVIDER_REGISTRY", "presets.registry")
PIN_DEFAULT_MINUTES = env_int("PIN_DEFAULT_MINUTES", 240, minimum=1)
PIN_MAX_MINUTES = env_int("PIN_MAX_MINUTES", 1440, minimum=1)
if PIN_DEFAULT_MINUTES > PIN_MAX_MINUTES:
    raise ImproperlyConfigured(f"PIN_DEFAULT_MINUTES={PIN_DEFAULT_MINUTES} exceeds PIN_MAX_MINUTES={PIN_MAX_MINUTES}")
PIN_ALERT_AFTER_MINUTES = env_int("PIN_ALERT_AFTER_MINUTES", 60, minimum=1)
ALERT_WEBHOOK_URL = env_str("ALERT_WEBHOOK_URL", "")
ALERT_EMAILS = env_list("ALERT_EMAILS", [])
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL", "http://localhost:8000")
# Instances that have not read their chain for this long no longer count in fleet status.
FLEET_INSTANCE_TTL_MINUTES = env_int("FLEET_INSTANCE_TTL_MINUTES", 10, minimum=1)
# Provider health from the SDK's usage reports: one-minute buckets kept this long.
PROVIDER_HEALTH_RETENTION_HOURS = env_int("PROVIDER_HEALTH_RETENTION_HOURS", 48, minimum=1, maximum=24 * 90)
# A step is failing when, over the last PROVIDER_FAILING_MINUTES, at least
# PROVIDER_FAILING_MIN_ATTEMPTS attempts were reported and PROVIDER_FAILING_ERROR_PERCENT of
# them failed on the provider's side (pages' "failing now" line, provider_failing alerts).
PROVIDER_FAILING_ERROR_PERCENT = env_int("PROVIDER_FAILING_ERROR_PERCENT", 20, minimum=1, maximum=100)
PROVIDER_FAILING_MINUTES = env_int("PROVIDER_FAILING_MINUTES", 5, minimum=1, maximum=60)
PROVIDER_FAILING_MIN_ATTEMPTS = env_int("PROVIDER_FAILING_MIN_ATTEMPTS", 20, minimum=1)
# provider_credentials: this many instances saw a provider reject their credentials (401/403)
# in the last PROVIDER_FAILING_MINUTES.
PROVIDER_CREDENTIALS_INSTANCES = env_int("PROVIDER_CREDENTIALS_INSTANCES", 3, minimum=1)
for _name, _url in (("ALERT_WEBHOOK_URL", ALERT_WEBHOOK_URL), ("PUBLIC_BASE_URL", PUBLIC_BASE_URL)):
    if _url and not _url.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"{_name}={_url!r} must be an http:// or https:// URL")
for _address in ALERT_EMAILS:
    if "@" not in _address.strip("@"):
        raise ImproperlyConfigured(f"ALERT_EMAILS: {_address!r} is not an email address (use a comma-separated list)")
# Delivery of alerts to the webhook and email: attempt n waits about BACKOFF * 2**(n-1)
# seconds (with jitter, capped at 15 minutes) after attempt n-1 failed; after MAX_ATTEMPTS the
# delivery is recorded as failed on the alert, which is kept.
ALERT_DELIVERY_MAX_ATTEMPTS = env_int("ALERT_DELIVERY_MAX_ATTEMPTS", 8, minimum=1)
ALERT_DELIVERY_BACKOFF_SECONDS = env_int("ALERT_DELIVERY_BACKOFF_SECONDS", 10, minimum=1)
ALERT_WEBHOOK_TIMEOUT_SECONDS = env_int("ALERT_WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1, maximum=60)
# Outgoing mail for ALERT_EMAILS (Django's SMTP backend).
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "controlplane@localhost")

# --- Celery -----------------------------------------------------------------------------
# Without CELERY_BROKER_URL the broker is kombu's filesystem transport under var/, so
# `make run` needs no server.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _queue_dir = VAR_DIR / "celery-queue"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(VAR_DIR / "celery-processed"),
        "control_folder": str(VAR_DIR / "celery-control"),
        "store_processed": False,
    }
else:
    # A Redis broker that does not answer must not hold a sweep or a web request for the
    # OS's TCP timeout when an alert delivery is queued; the alert stays due for the next sweep.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2}
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "expire-pins": {
        "task": "presets.tasks.expire_pins",
        "schedule": float(env_int("EXPIRE_PINS_EVERY_SECONDS", 15, minimum=1)),
    },
    "alert-stale-pins": {
        "task": "audit.tasks.alert_stale_pins",
        "schedule": float(env_int("ALERT_STALE_PINS_EVERY_SECONDS", 60, minimum=1)),
    },
    "alert-providers": {
        "task": "audit.tasks.alert_providers",
        "schedule": float(env_int("PROVIDER_ALERTS_EVERY_SECONDS", 15, minimum=1)),
    },
    "prune-provider-health": {
        "task": "audit.tasks.prune_provider_health",
        "schedule": float(env_int("PRUNE_PROVIDER_HEALTH_EVERY_SECONDS", 600, minimum=1)),
    },
}

# --- API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "presets.api.authentication.ServiceTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["presets.api.authentication.CanRead"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's, plus: too deep, NUL and lone surrogates are a 400 naming where (not a 500).
    "DEFAULT_PARSER_CLASSES": ["presets.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "presets.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "presets.api.schema.ViewSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LLM fallback-chain control plane",
    "DESCRIPTION": "Read the live fallback chain of each routing slot; pin, revert, extend "
    "and restore reviewed presets.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
}

# LOG_FORMAT=json: one JSON object per line (time, level, logger, message, exception).
LOG_FORMAT = env_str("LOG_FORMAT", "plain").strip().lower() or "plain"
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} must be plain or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        # One line per record: control characters in the message (a reason's newline) escaped.
        "plain": {
            "()": "controlplane.logging_plain.PlainFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json": {"()": "controlplane.logging_json.JsonFormatter"},
    },
    # Expected refusals (a viewer's forbidden POST, a failed CSRF check: any 4xx) are one
    # line without a traceback; a 500 keeps its traceback at ERROR.
    "filters": {"refusals_on_one_line": {"()": "controlplane.log_filters.RefusalsOnOneLine"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["refusals_on_one_line"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# History is append-only: the admin shows it but offers no "revert to this" form.
SIMPLE_HISTORY_REVERT_DISABLED = True

# --- Metrics (/metrics) -----------------------------------------------------------------
# Per-process counters (read requests, long-poll waiters) are shared between the web
# processes of one host through prometheus_client's multiprocess files in this directory;
# everything about chains is computed from the database at scrape time. Open by default
# (Prometheus scrapes from inside the network; no reasons or names of people are exposed);
# set METRICS_TOKEN to require `Authorization: Bearer <METRICS_TOKEN>`.
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "prometheus"))
# prometheus_client reads the variable when it is imported and when a metric is created.
os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
