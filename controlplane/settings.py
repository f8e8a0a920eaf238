"""The control plane's one settings file: every knob is an environment variable with a safe default.

Bad values fail at start with a message naming the variable and what it accepts.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from controlplane.secret_key import LOCAL_KEY_NAME, configured_secret_key
from presets.environments import configured as configured_environments

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


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number (use a decimal point: 2.5)") from None
    if not math.isfinite(value) or value < minimum:
        raise ImproperlyConfigured(f"{name}={raw} must be a number of at least {minimum:g}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
# A strong SECRET_KEY, or the process refuses to start. Without one, the key `make run` and
# `make test` generate once into VAR_DIR/secret_key (mode 0600) is used: a local run needs no
# configuration, and a deployment that forgot the key stops instead of signing sessions with
# a key anyone could guess. DEBUG=true generates that file on first use.
SECRET_KEY = configured_secret_key(os.environ.get("SECRET_KEY", ""), local_file=VAR_DIR / LOCAL_KEY_NAME, create=DEBUG)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A form older than its person's last sign-in fails the check: say so in the site's layout.
CSRF_FAILURE_VIEW = "pages.errors.csrf_failure"

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
    # The domain (models, services) ...
    "presets",
    "audit",
    # ... and its interfaces (docs/ARCHITECTURE.md): apps without models, for their signal
    # receivers, template tags, static files, admin, commands and tasks.
    "read_path",
    "pages",
    "commands",
    "worker",
    "chatops",
]

MIDDLEWARE = [
    # First, so it sees every answer: the request id (X-Request-ID), the request's time in
    # /metrics and its access line.
    "controlplane.request_context.RequestContextMiddleware",
    # Before anything reads the path: /env/<env>/... is the same URL in that environment.
    "controlplane.environment_paths.EnvironmentPathMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "controlplane.database_outage.DatabaseOutageMiddleware",
    "controlplane.query_string.RefuseUnstorableQueryMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After authentication: the signed-in person is the actor of the access changes a
    # request makes (the admin's role and flag changes), in the access history.
    "controlplane.access_actor.AccessActorMiddleware",
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
                "pages.context_processors.open_alerts",
                "pages.context_processors.environment",
                "pages.context_processors.limits",
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

# A peer that is gone (a host down, a cut network: nothing acknowledges) is noticed by TCP
# within ~10 s on every PostgreSQL connection, the LISTEN one included (LISTEN_DATABASE_URL's
# too), which waits idle for long. A URL's own query string overrides them.
_PEER_GONE_OPTIONS = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
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
    # (docs/deploy.md, "Database connections"). 0 turns pooling off (a connection per request).
    DATABASE_POOL_MAX_SIZE = env_int("DATABASE_POOL_MAX_SIZE", 8, minimum=0, maximum=1000)
    # Django's backend, answering within a bound whatever the database does
    # (controlplane/postgresql/base.py): at once while PostgreSQL is down, and within
    # DATABASE_POOL_TIMEOUT + DATABASE_STATEMENT_TIMEOUT when it stops answering.
    DATABASES["default"]["ENGINE"] = "controlplane.postgresql"
    if DATABASE_POOL_MAX_SIZE:
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": min(env_int("DATABASE_POOL_MIN_SIZE", 1, minimum=0), DATABASE_POOL_MAX_SIZE),
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 3, minimum=1, maximum=600),
        }
    # Every wait for the server (a statement, a commit, the pool's check of a connection) ends
    # after this many seconds: the connection is closed and the request answers 503. A server
    # that stopped answering (its processes stopped, a frozen network path) is otherwise waited
    # for as long as the kernel keeps the connection, minutes. Nothing the web and worker
    # processes run takes seconds; migrations are exempt. 0: no deadline.
    DATABASE_STATEMENT_TIMEOUT = env_int("DATABASE_STATEMENT_TIMEOUT", 3, minimum=0, maximum=3600)
    for _libpq_option, _libpq_default in _PEER_GONE_OPTIONS.items():
        DATABASES["default"]["OPTIONS"].setdefault(_libpq_option, _libpq_default)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # With a pool this checks each connection as it is handed out, so a database restart
    # costs no request an error (the pool replaces connections the server closed).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# --- Change notifications (LISTEN) ------------------------------------------------------
# Each web process holds one LISTEN connection that wakes its long polls as a change commits,
# made with DATABASE_URL's settings (sslmode, sslrootcert, options... included). LISTEN needs
# a session of its own, which a transaction pooler (PgBouncer pool_mode=transaction) does not
# keep: behind one, set LISTEN_DATABASE_URL to a direct connection to the same database (its
# own ?sslmode=... applies). Changes still NOTIFY through DATABASE_URL. /readyz says which.
LISTEN_DATABASE_URL = env_str("LISTEN_DATABASE_URL", "")
LISTEN_DATABASE = None
if LISTEN_DATABASE_URL:
    _use = "use e.g. postgres://user@db-host:5432/name, or leave it unset"
    try:
        LISTEN_DATABASE = dj_database_url.parse(LISTEN_DATABASE_URL)
    except ValueError as exc:
        raise ImproperlyConfigured(f"LISTEN_DATABASE_URL is not a database URL ({exc}); {_use}") from None
    if LISTEN_DATABASE["ENGINE"] not in {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}:
        raise ImproperlyConfigured(f"LISTEN_DATABASE_URL must be a postgres:// URL (LISTEN is PostgreSQL's): {_use}")
    if not LISTEN_DATABASE["NAME"]:
        raise ImproperlyConfigured(f"LISTEN_DATABASE_URL must name the database: {_use}")
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        raise ImproperlyConfigured("LISTEN_DATABASE_URL is for PostgreSQL: unset it, or make DATABASE_URL postgres://")
    LISTEN_DATABASE["OPTIONS"] = {
        "connect_timeout": DATABASES["default"]["OPTIONS"]["connect_timeout"],
        **_PEER_GONE_OPTIONS,
        **LISTEN_DATABASE.get("OPTIONS", {}),
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# --- Sign-in throttling (django-axes) ----------------------------------------------------
# Failures are counted in the database, so every web process sees the same count, over the
# last LOGIN_LOCKOUT_MINUTES: LOGIN_FAILURE_LIMIT for one username from one address pauses
# that username there (one attacker cannot lock a person out from everywhere), and
# LOGIN_ADDRESS_FAILURE_LIMIT from one address, whatever the usernames, pauses every sign-in
# from it (spraying one password over many usernames), high enough that an office behind one
# address is not paused by a few typos. Pauses lift by themselves; an admin lifts one at once
# with `manage.py axes_reset_username NAME` or `manage.py axes_reset_ip ADDRESS`.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1, maximum=1000)
LOGIN_ADDRESS_FAILURE_LIMIT = env_int("LOGIN_ADDRESS_FAILURE_LIMIT", 20, minimum=1, maximum=100_000)
if LOGIN_ADDRESS_FAILURE_LIMIT < LOGIN_FAILURE_LIMIT:
    raise ImproperlyConfigured(
        f"LOGIN_ADDRESS_FAILURE_LIMIT={LOGIN_ADDRESS_FAILURE_LIMIT} is below LOGIN_FAILURE_LIMIT="
        f"{LOGIN_FAILURE_LIMIT}: the address-wide limit counts every username's failures, make it at least as high"
    )
# Axes counts per (username, address); the callable answers 0 once the address is over its limit.
AXES_FAILURE_LIMIT = "controlplane.login_lockout.failure_limit"
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1, maximum=24 * 60))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "controlplane.login_lockout.client_address"
AXES_RESET_ON_SUCCESS = True
# A fixed window the lockout page can state; retrying while locked does not extend it.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "controlplane.login_lockout.lockout_response"
# No "AXES: BEGIN ..." banner from every process and management command.
AXES_VERBOSE = False

# --- Single sign-on: OpenID Connect, a trusted proxy's headers, local passwords ----------
# docs/security.md, "Single sign-on".
# OpenID Connect (controlplane/sso.py) is on when OIDC_ISSUER is set:
# the sign-in page offers "Sign in with OIDC_PROVIDER_NAME", the provider's endpoints come from
# <OIDC_ISSUER>/.well-known/openid-configuration at the first sign-in (each OIDC_*_ENDPOINT
# given replaces its entry), and the provider sends people back to /accounts/oidc/callback/.
# A trusted reverse proxy (controlplane/proxy_auth.py) names the person in
# PROXY_AUTH_USER_HEADER, believed only from PROXY_AUTH_TRUSTED_PROXIES (elsewhere: 403).
# Both take roles from the provider's groups at every sign-in (controlplane/sso_accounts.py):
# OIDC_ONCALL_GROUPS, OIDC_VIEWER_GROUPS, OIDC_STAFF_GROUPS, OIDC_SUPERUSER_GROUPS; a person in
# none of them is refused, or with OIDC_UNMAPPED_USERS=viewer signed in as a viewer.
# LOCAL_PASSWORDS=false turns password sign-in off (the pages and the admin's).


def _sso_url(name: str, value: str) -> str:
    """An https:// URL (http:// only on this machine, for a provider run locally)."""
    parts = urlsplit(value)
    local = parts.hostname in {"localhost", "127.0.0.1", "::1"}
    if not parts.hostname or parts.scheme not in {"https", "http"} or (parts.scheme == "http" and not local):
        raise ImproperlyConfigured(f"{name}={value!r} must be an https:// URL (http:// only for localhost)")
    return value


def _header_name(name: str) -> str:
    value = env_str(name, "").strip()
    if value and not all(char.isascii() and (char.isalnum() or char == "-") for char in value):
        raise ImproperlyConfigured(f"{name}={value!r} is not an HTTP header name: use letters, digits and -")
    return value


OIDC_ISSUER = env_str("OIDC_ISSUER", "").strip()
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID", "").strip()
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", "")
# Explicit endpoints, for a provider without a discovery document (or one that is wrong).
_OIDC_ENDPOINT_VARIABLES = {
    "authorization_endpoint": "OIDC_AUTHORIZATION_ENDPOINT",
    "token_endpoint": "OIDC_TOKEN_ENDPOINT",
    "userinfo_endpoint": "OIDC_USERINFO_ENDPOINT",
    "jwks_uri": "OIDC_JWKS_ENDPOINT",
}
OIDC_ENDPOINTS = {key: env_str(name, "").strip() for key, name in _OIDC_ENDPOINT_VARIABLES.items()}
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "").strip() or (urlsplit(OIDC_ISSUER).hostname or "single sign-on")
OIDC_SCOPES = env_str("OIDC_SCOPES", "openid email profile groups").split()
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username").strip()
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups").strip()
OIDC_ONCALL_GROUPS = env_list("OIDC_ONCALL_GROUPS", [])
OIDC_VIEWER_GROUPS = env_list("OIDC_VIEWER_GROUPS", [])
OIDC_STAFF_GROUPS = env_list("OIDC_STAFF_GROUPS", [])
# Superuser and staff, taken away too when the group goes (sso_accounts.roles_for).
OIDC_SUPERUSER_GROUPS = env_list("OIDC_SUPERUSER_GROUPS", [])
OIDC_UNMAPPED_USERS = env_str("OIDC_UNMAPPED_USERS", "refuse").strip().lower()
OIDC_SIGN_ALGORITHM = env_str("OIDC_SIGN_ALGORITHM", "RS256").strip()
OIDC_TOKEN_AUTH_METHOD = env_str("OIDC_TOKEN_AUTH_METHOD", "client_secret_basic").strip()
OIDC_TIMEOUT_SECONDS = env_int("OIDC_TIMEOUT_SECONDS", 10, minimum=1, maximum=60)
# A CA file for a provider whose certificate a private CA signed.
OIDC_CA_BUNDLE = env_str("OIDC_CA_BUNDLE", "").strip()
# Roles are read at sign-in: a session single sign-on made lasts this long, so a group removed
# at the provider takes effect within it (Django's two weeks otherwise).
OIDC_SESSION_HOURS = env_int("OIDC_SESSION_HOURS", 12, minimum=1, maximum=24 * 14)
if OIDC_UNMAPPED_USERS not in {"refuse", "viewer"}:
    raise ImproperlyConfigured(f"OIDC_UNMAPPED_USERS={OIDC_UNMAPPED_USERS!r} must be refuse or viewer")
if OIDC_ISSUER:
    _sso_url("OIDC_ISSUER", OIDC_ISSUER)
    for _name, _value in (("OIDC_CLIENT_ID", OIDC_CLIENT_ID), ("OIDC_CLIENT_SECRET", OIDC_CLIENT_SECRET)):
        if not _value:
            raise ImproperlyConfigured(f"OIDC_ISSUER is set but {_name} is not: copy it from the provider's client")
    if "openid" not in OIDC_SCOPES:
        raise ImproperlyConfigured(f"OIDC_SCOPES={' '.join(OIDC_SCOPES)!r} must include openid")
    for _name, _value in (("OIDC_USERNAME_CLAIM", OIDC_USERNAME_CLAIM), ("OIDC_GROUPS_CLAIM", OIDC_GROUPS_CLAIM)):
        if not _value:
            raise ImproperlyConfigured(f"{_name} is empty: name the claim (e.g. preferred_username, groups)")
    for _key, _value in OIDC_ENDPOINTS.items():
        if _value:
            _sso_url(_OIDC_ENDPOINT_VARIABLES[_key], _value)
    if OIDC_CA_BUNDLE and not Path(OIDC_CA_BUNDLE).is_file():
        raise ImproperlyConfigured(f"OIDC_CA_BUNDLE={OIDC_CA_BUNDLE!r} is not a file: give the PEM file of the CA")
elif OIDC_CLIENT_ID or OIDC_CLIENT_SECRET or any(OIDC_ENDPOINTS.values()):
    raise ImproperlyConfigured("OIDC_CLIENT_ID, OIDC_CLIENT_SECRET or an OIDC_*_ENDPOINT is set without OIDC_ISSUER")
if OIDC_SIGN_ALGORITHM not in {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}:
    raise ImproperlyConfigured(f"OIDC_SIGN_ALGORITHM={OIDC_SIGN_ALGORITHM!r} must be RS256, RS384, RS512 or ES256-512")
if OIDC_TOKEN_AUTH_METHOD not in {"client_secret_basic", "client_secret_post"}:
    raise ImproperlyConfigured(
        f"OIDC_TOKEN_AUTH_METHOD={OIDC_TOKEN_AUTH_METHOD!r} must be client_secret_basic or client_secret_post"
    )

PROXY_AUTH_USER_HEADER = _header_name("PROXY_AUTH_USER_HEADER")
PROXY_AUTH_GROUPS_HEADER = _header_name("PROXY_AUTH_GROUPS_HEADER")
PROXY_AUTH_TRUSTED_PROXIES = env_list("PROXY_AUTH_TRUSTED_PROXIES", [])
for _entry in PROXY_AUTH_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_entry, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"PROXY_AUTH_TRUSTED_PROXIES: {_entry!r} is not an address or network (e.g. 10.0.0.5, 10.0.0.0/24)"
        ) from None
if PROXY_AUTH_USER_HEADER and not PROXY_AUTH_TRUSTED_PROXIES:
    raise ImproperlyConfigured(
        "PROXY_AUTH_USER_HEADER is set but PROXY_AUTH_TRUSTED_PROXIES is empty: list the proxy's addresses"
    )
if not PROXY_AUTH_USER_HEADER and (PROXY_AUTH_GROUPS_HEADER or PROXY_AUTH_TRUSTED_PROXIES):
    raise ImproperlyConfigured(
        "PROXY_AUTH_GROUPS_HEADER or PROXY_AUTH_TRUSTED_PROXIES is set without PROXY_AUTH_USER_HEADER"
    )

LOCAL_PASSWORDS = env_bool("LOCAL_PASSWORDS", True)
if not LOCAL_PASSWORDS and not (OIDC_ISSUER or PROXY_AUTH_USER_HEADER):
    raise ImproperlyConfigured(
        "LOCAL_PASSWORDS=false leaves no way to sign in: set OIDC_ISSUER or PROXY_AUTH_USER_HEADER too"
    )
# Both are always listed and do nothing until configured, so a session made by one ends when
# it is turned off. Without local passwords, Django's password backend goes (and with it the
# sessions it made).
AUTHENTICATION_BACKENDS += ["controlplane.sso.OIDCBackend", "controlplane.proxy_auth.ProxyBackend"]
if not LOCAL_PASSWORDS:
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")
# Right after AuthenticationMiddleware (it needs request.user); it returns at once unless
# PROXY_AUTH_USER_HEADER is set.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "controlplane.proxy_auth.ProxyAuthMiddleware",
)

# --- HTTPS and browser protections -------------------------------------------------------
# HTTPS=true is for a deployment behind a TLS-terminating proxy that sets X-Forwarded-Proto
# (compose's Caddy of `--profile https`, or your own): it redirects plain http to https, marks
# cookies Secure and sends HSTS. The default (false) keeps `make run` and a first
# `docker compose up` working on plain http://localhost.
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
# Probes and the scraper talk plain http to the container from inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Behind such a proxy every connection comes from the proxy: sign-in throttling takes the
# client's address from X-Forwarded-For instead, the entry the outermost of this many proxies
# appended (1 with HTTPS; 0 reads the connection's address).
FORWARDED_FOR_PROXIES = env_int("FORWARDED_FOR_PROXIES", 1 if HTTPS else 0, minimum=0, maximum=10)
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
# From the site's root, as granian serves them: a relative URL would follow the script prefix,
# which is /env/<env>/ on a non-default environment's pages (controlplane/environment_paths.py).
STATIC_URL = "/static/"
STATIC_ROOT = env_str("STATIC_ROOT", str(VAR_DIR / "static"))

# --- The product's own knobs ------------------------------------------------------------
PRESETS_FILE = env_str("PRESETS_FILE", str(BASE_DIR / "presets" / "presets.example.json"))
PROVIDER_REGISTRY = env_str("PROVIDER_REGISTRY", "presets.registry")
PIN_DEFAULT_MINUTES = env_int("PIN_DEFAULT_MINUTES", 240, minimum=1)
PIN_MAX_MINUTES = env_int("PIN_MAX_MINUTES", 1440, minimum=1)
# Environments, lowest first (presets/environments.py): a sync reaches the first, promotions
# the next ones; the last is the default (production) that tokens and pages without one mean.
try:
    ENVIRONMENTS = configured_environments(env_list("ENVIRONMENTS", ["production"]))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# A promotion's evidence (presets/promotions.py): how long the lower environment has served the
# revision, how much worse its error rate may be than before it, and whether a second person
# must approve.
PROMOTION_MIN_SERVED_MINUTES = env_int("PROMOTION_MIN_SERVED_MINUTES", 60, minimum=0, maximum=60 * 24 * 30)
PROMOTION_ERROR_MARGIN_PERCENT = env_int("PROMOTION_ERROR_MARGIN_PERCENT", 10, minimum=0, maximum=100)
PROMOTION_APPROVAL = env_bool("PROMOTION_APPROVAL", False)
# How far ahead a pin may be planned (presets/plans.py).
PLAN_MAX_DAYS_AHEAD = env_int("PLAN_MAX_DAYS_AHEAD", 90, minimum=1, maximum=3660)
if PIN_DEFAULT_MINUTES > PIN_MAX_MINUTES:
    raise ImproperlyConfigured(f"PIN_DEFAULT_MINUTES={PIN_DEFAULT_MINUTES} exceeds PIN_MAX_MINUTES={PIN_MAX_MINUTES}")
PIN_ALERT_AFTER_MINUTES = env_int("PIN_ALERT_AFTER_MINUTES", 60, minimum=1)
# After a new signing key is activated, the key it replaces stays listed as trusted (manage.py
# signing_keys public) this long: services trusting both accept documents signed by either.
SIGNING_KEY_OVERLAP_HOURS = env_int("SIGNING_KEY_OVERLAP_HOURS", 168, minimum=1, maximum=24 * 366)
# The signing keys' private halves are sealed (AES-GCM) with a key kept outside the database
# (presets/key_sealing.py): SIGNING_KEYS_SECRET, or the file SIGNING_KEYS_SECRET_FILE names
# (a container secret), or when neither is set a key derived from SECRET_KEY. Earlier secrets
# (an old SIGNING_KEYS_SECRET or an old SECRET_KEY) listed in SIGNING_KEYS_SECRET_FALLBACKS
# still open keys sealed with them, until `manage.py signing_keys reseal` seals them anew.
SIGNING_KEYS_SECRET_MIN_LENGTH = 32
_SIGNING_SECRET_GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _signing_keys_secret(name: str, value: str) -> str:
    if len(value) < SIGNING_KEYS_SECRET_MIN_LENGTH:
        raise ImproperlyConfigured(
            f"{name} is too short ({len(value)} characters, fewer than {SIGNING_KEYS_SECRET_MIN_LENGTH}): "
            f"set it to the output of {_SIGNING_SECRET_GENERATE}"
        )
    return value


SIGNING_KEYS_SECRET = env_str("SIGNING_KEYS_SECRET", "").strip()
SIGNING_KEYS_SECRET_FILE = env_str("SIGNING_KEYS_SECRET_FILE", "").strip()
if SIGNING_KEYS_SECRET and SIGNING_KEYS_SECRET_FILE:
    raise ImproperlyConfigured("SIGNING_KEYS_SECRET and SIGNING_KEYS_SECRET_FILE are both set: keep one")
if SIGNING_KEYS_SECRET:
    SIGNING_KEYS_SECRET = _signing_keys_secret("SIGNING_KEYS_SECRET", SIGNING_KEYS_SECRET)
elif SIGNING_KEYS_SECRET_FILE:
    try:
        SIGNING_KEYS_SECRET = Path(SIGNING_KEYS_SECRET_FILE).read_text().strip()
    except OSError as _exc:
        raise ImproperlyConfigured(
            f"SIGNING_KEYS_SECRET_FILE={SIGNING_KEYS_SECRET_FILE!r} cannot be read ({_exc.strerror or _exc})"
        ) from None
    except UnicodeDecodeError:
        raise ImproperlyConfigured(
            f"SIGNING_KEYS_SECRET_FILE={SIGNING_KEYS_SECRET_FILE!r} is not text: write the secret in it, one line"
        ) from None
    SIGNING_KEYS_SECRET = _signing_keys_secret(
        f"the secret in SIGNING_KEYS_SECRET_FILE={SIGNING_KEYS_SECRET_FILE!r}", SIGNING_KEYS_SECRET
    )
SIGNING_KEYS_SECRET_FALLBACKS = [
    _signing_keys_secret("an entry of SIGNING_KEYS_SECRET_FALLBACKS", _old)
    for _old in env_list("SIGNING_KEYS_SECRET_FALLBACKS", [])
]
ALERT_WEBHOOK_URL = env_str("ALERT_WEBHOOK_URL", "")
ALERT_EMAILS = env_list("ALERT_EMAILS", [])
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL", "http://localhost:8000")
# Held long polls per web process, at most: a long poll beyond it is answered at once (the SDK
# then polls at its interval), which bounds the memory held polls take. granian's own bound
# (--backpressure, WEB_MAX_REQUESTS in make serve and compose: 20480) counts open
# connections, held polls and idle keep-alive ones alike: keep it above the fleet's.
LONG_POLL_MAX_HELD = env_int("LONG_POLL_MAX_HELD", 16384, minimum=0, maximum=1_000_000)
# Instances that have not read their chain for this long no longer count in fleet status.
FLEET_INSTANCE_TTL_MINUTES = env_int("FLEET_INSTANCE_TTL_MINUTES", 10, minimum=1)
# Provider health from the SDK's usage reports: one-minute buckets kept this long.
PROVIDER_HEALTH_RETENTION_HOURS = env_int("PROVIDER_HEALTH_RETENTION_HOURS", 48, minimum=1, maximum=24 * 90)
# The audit export (GET /api/v1/history, manage.py export_history; presets/history_export.py).
# It ends at the changes made this many seconds before it starts: a change is stamped a moment
# before it commits, and one still committing when an export read past its time would be
# skipped by a resume. Raise it if commits can take longer or the web hosts' clocks differ.
HISTORY_EXPORT_SETTLE_SECONDS = env_int("HISTORY_EXPORT_SETTLE_SECONDS", 5, minimum=0, maximum=3600)
# Rows per database read and per chunk written: an export's memory is about this many entries.
HISTORY_EXPORT_BATCH_ROWS = env_int("HISTORY_EXPORT_BATCH_ROWS", 1000, minimum=1, maximum=10_000)
# A step is failing when, over the last PROVIDER_FAILING_MINUTES, at least
# PROVIDER_FAILING_MIN_ATTEMPTS attempts were reported and PROVIDER_FAILING_ERROR_PERCENT of
# them failed on the provider's side (pages' "failing now" line, provider_failing alerts).
PROVIDER_FAILING_ERROR_PERCENT = env_int("PROVIDER_FAILING_ERROR_PERCENT", 20, minimum=1, maximum=100)
PROVIDER_FAILING_MINUTES = env_int("PROVIDER_FAILING_MINUTES", 5, minimum=1, maximum=60)
PROVIDER_FAILING_MIN_ATTEMPTS = env_int("PROVIDER_FAILING_MIN_ATTEMPTS", 20, minimum=1)
# provider_credentials: this many instances saw a provider reject their credentials (401/403)
# in the last PROVIDER_FAILING_MINUTES.
PROVIDER_CREDENTIALS_INSTANCES = env_int("PROVIDER_CREDENTIALS_INSTANCES", 3, minimum=1)
# Usage reports are evidence, never authority (audit/usage.py, audit/provider_health.py): a
# provider alert needs this many distinct instances, each of which polled the chain within
# FLEET_INSTANCE_TTL_MINUTES, that see the step failing (or the credentials rejected); one
# instance's attempts weigh at most as much as the median reporting instance's.
PROVIDER_ALERT_MIN_INSTANCES = env_int("PROVIDER_ALERT_MIN_INSTANCES", 3, minimum=1, maximum=10_000)
# Guarded pins (presets/guards.py, audit/guards.py): during GUARD_BAKE_MINUTES after a guarded
# pin, when the new head's error rate is GUARD_ERROR_MARGIN_PERCENT points above the previous
# head's over the same span before the pin, or its p95 latency GUARD_LATENCY_MARGIN_PERCENT %
# above it, for GUARD_SUSTAINED_SECONDS, judged on GUARD_MIN_ATTEMPTS attempts and
# GUARD_MIN_INSTANCES instances on each side, the pin's previous selection is restored
# (actor system:guard). Checked every GUARD_EVERY_SECONDS. Pins are guarded when the person
# asks, from the alert page by default, and all of them when GUARD_PINS_BY_DEFAULT is on.
GUARD_PINS_BY_DEFAULT = env_bool("GUARD_PINS_BY_DEFAULT", False)
GUARD_BAKE_MINUTES = env_int("GUARD_BAKE_MINUTES", 30, minimum=1, maximum=1440)
GUARD_ERROR_MARGIN_PERCENT = env_int("GUARD_ERROR_MARGIN_PERCENT", 10, minimum=1, maximum=100)
GUARD_LATENCY_MARGIN_PERCENT = env_int("GUARD_LATENCY_MARGIN_PERCENT", 50, minimum=1, maximum=10_000)
GUARD_SUSTAINED_SECONDS = env_int("GUARD_SUSTAINED_SECONDS", 180, minimum=0, maximum=86_400)
GUARD_MIN_ATTEMPTS = env_int("GUARD_MIN_ATTEMPTS", 20, minimum=1)
GUARD_MIN_INSTANCES = env_int("GUARD_MIN_INSTANCES", PROVIDER_ALERT_MIN_INSTANCES, minimum=1, maximum=10_000)
# Usage reports accepted per minute, counted in the database (every web process shares them);
# past one, 429 with Retry-After (the SDK waits, keeping its counts). Per instance: the SDK
# reports once a minute by default, and every DRILL_REPORT_INTERVAL_S (10 s) while it takes part
# in a failover drill, so 8 leaves room for that, a 10-second usage_interval and restarts;
# instances fleet status does not know (never polled the chain) share one such
# limit per token and chain, so made-up names buy nothing. Per token and per chain: size them
# above the fleet's reports a minute (instances x 60 / usage_interval). The chain's bounds the
# storage reports add to a chain each minute, whatever the fleet claims.
USAGE_REPORTS_PER_INSTANCE_PER_MINUTE = env_int("USAGE_REPORTS_PER_INSTANCE_PER_MINUTE", 8, minimum=1, maximum=600)
USAGE_REPORTS_PER_TOKEN_PER_MINUTE = env_int("USAGE_REPORTS_PER_TOKEN_PER_MINUTE", 1200, minimum=1, maximum=10**6)
USAGE_REPORTS_PER_CHAIN_PER_MINUTE = env_int("USAGE_REPORTS_PER_CHAIN_PER_MINUTE", 3000, minimum=1, maximum=10**6)
# Failover drills: a drill is judged this long after its window closed (the fleet reports
# within DRILL_REPORT_INTERVAL_S of the end), and its report lists at most this many instances.
DRILL_JUDGE_AFTER_SECONDS = env_int("DRILL_JUDGE_AFTER_SECONDS", 15, minimum=1, maximum=600)
DRILL_REPORT_MAX_INSTANCES = env_int("DRILL_REPORT_MAX_INSTANCES", 500, minimum=1, maximum=100_000)
# Fleet evidence is bounded by who sends it (audit/fleet_recorder.py, audit/fleet_seen.py,
# audit/evidence.py). Instance rows one token may make: past it the oldest (by last seen) are
# pruned and fleet status says the token reached its cap. Sized above the largest real service
# (or relay) a token stands for.
FLEET_MAX_INSTANCES_PER_TOKEN = env_int("FLEET_MAX_INSTANCES_PER_TOKEN", 20_000, minimum=1, maximum=10**7)
# POST /api/v1/fleet/seen calls a relay token may make a minute (a relay sends one a second,
# more in batches of 1,000 behind a large fleet); past it 429 with Retry-After.
FLEET_SEEN_PER_TOKEN_PER_MINUTE = env_int("FLEET_SEEN_PER_TOKEN_PER_MINUTE", 600, minimum=1, maximum=10**6)
# A page-level alert (provider_failing, provider_credentials) or a guard's restore needs its
# evidence from this many distinct service tokens, or from one marked sole evidence.
EVIDENCE_MIN_TOKENS = env_int("EVIDENCE_MIN_TOKENS", 2, minimum=1, maximum=100)
# Spend alerts (audit/spend_alerts.py): a chain's spend pace over the last SPEND_ALERT_MINUTES
# (the fleet's reported tokens at the registry's prices, in its currency an hour), or that of
# its steps other than the live head ("fallback"), raises a ``spend`` alert when it is over
# SPEND_ALERT_PER_HOUR / SPEND_ALERT_FALLBACK_PER_HOUR (0: no such bound), or SPEND_ALERT_RATIO
# times its baseline (its pace over the SPEND_BASELINE_HOURS before the window, which needs an
# hour of reports; 0: no ratio; a baseline under SPEND_ALERT_MIN_PER_HOUR counts as that much)
# while at least SPEND_ALERT_MIN_PER_HOUR (so cents never page).
# Its evidence is weighed like a provider alert's (PROVIDER_ALERT_MIN_INSTANCES instances,
# EVIDENCE_MIN_TOKENS tokens).
SPEND_ALERT_MINUTES = env_int("SPEND_ALERT_MINUTES", 10, minimum=1, maximum=240)
SPEND_ALERT_PER_HOUR = env_float("SPEND_ALERT_PER_HOUR", 0.0, minimum=0.0)
SPEND_ALERT_FALLBACK_PER_HOUR = env_float("SPEND_ALERT_FALLBACK_PER_HOUR", 0.0, minimum=0.0)
SPEND_ALERT_RATIO = env_float("SPEND_ALERT_RATIO", 3.0, minimum=0.0)
SPEND_ALERT_MIN_PER_HOUR = env_float("SPEND_ALERT_MIN_PER_HOUR", 1.0, minimum=0.0)
SPEND_BASELINE_HOURS = env_int("SPEND_BASELINE_HOURS", 24, minimum=1, maximum=47)
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
# Change notifications (docs/notifications.md): every change and every alert raised
# and resolved go to each target set here, with the delivery, retries and backoff above.
# NOTIFY_WEBHOOK_URL gets every event, signed with NOTIFY_WEBHOOK_SECRET (HMAC-SHA256);
# ALERT_WEBHOOK_URL, its older alerts-only form, keeps its body when it is set instead.
NOTIFY_WEBHOOK_URL = env_str("NOTIFY_WEBHOOK_URL", "").strip()
NOTIFY_WEBHOOK_SECRET = env_str("NOTIFY_WEBHOOK_SECRET", "").strip()
SLACK_WEBHOOK_URL = env_str("SLACK_WEBHOOK_URL", "").strip()
# Acting from the alert (docs/on-call.md, "Acting from the alert"): the deep links in
# notifications open a prefilled review for this long; Slack's buttons, modals and slash command
# need the Slack app's signing secret (each request's signature, 5-minute replay window) and its
# bot token (views.open, chat.update, users.info); SLACK_API_URL only changes in tests.
DEEP_LINK_MAX_AGE_HOURS = env_int("DEEP_LINK_MAX_AGE_HOURS", 24, minimum=1, maximum=24 * 30)
SLACK_SIGNING_SECRET = env_str("SLACK_SIGNING_SECRET", "").strip()
SLACK_BOT_TOKEN = env_str("SLACK_BOT_TOKEN", "").strip()
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/").strip()
PAGERDUTY_ROUTING_KEY = env_str("PAGERDUTY_ROUTING_KEY", "").strip()
PAGERDUTY_EVENTS_URL = env_str("PAGERDUTY_EVENTS_URL", "https://events.pagerduty.com/v2/enqueue").strip()
# Changes go to PagerDuty as change events (shown beside incidents, never paged) unless false.
PAGERDUTY_CHANGE_EVENTS = env_bool("PAGERDUTY_CHANGE_EVENTS", True)
PAGERDUTY_CHANGE_EVENTS_URL = env_str(
    "PAGERDUTY_CHANGE_EVENTS_URL", "https://events.pagerduty.com/v2/change/enqueue"
).strip()
# ALERT_EMAILS get alerts; with NOTIFY_EMAIL_CHANGES=true every change too. NOTIFY_EMAILS is
# another name for ALERT_EMAILS.
NOTIFY_EMAIL_CHANGES = env_bool("NOTIFY_EMAIL_CHANGES", False)
if env_list("NOTIFY_EMAILS", []):
    if ALERT_EMAILS:
        raise ImproperlyConfigured("NOTIFY_EMAILS and ALERT_EMAILS are both set: they name the same list, keep one")
    ALERT_EMAILS = env_list("NOTIFY_EMAILS", [])
    for _address in ALERT_EMAILS:
        if "@" not in _address.strip("@"):
            raise ImproperlyConfigured(
                f"NOTIFY_EMAILS: {_address!r} is not an email address (use a comma-separated list)"
            )
if NOTIFY_WEBHOOK_URL and ALERT_WEBHOOK_URL:
    raise ImproperlyConfigured(
        "NOTIFY_WEBHOOK_URL and ALERT_WEBHOOK_URL are both set: NOTIFY_WEBHOOK_URL replaces "
        "ALERT_WEBHOOK_URL (and also gets alerts), keep one"
    )
if NOTIFY_WEBHOOK_URL and len(NOTIFY_WEBHOOK_SECRET) < 32:
    raise ImproperlyConfigured(
        "NOTIFY_WEBHOOK_SECRET must be set, at least 32 characters, with NOTIFY_WEBHOOK_URL (the receiver "
        'checks signatures with it): python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
    )
for _name, _url in (
    ("NOTIFY_WEBHOOK_URL", NOTIFY_WEBHOOK_URL),
    ("SLACK_WEBHOOK_URL", SLACK_WEBHOOK_URL),
    ("PAGERDUTY_EVENTS_URL", PAGERDUTY_EVENTS_URL),
    ("PAGERDUTY_CHANGE_EVENTS_URL", PAGERDUTY_CHANGE_EVENTS_URL),
):
    if _url and not _url.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"{_name}={_url!r} must be an http:// or https:// URL")
if PAGERDUTY_ROUTING_KEY and not (PAGERDUTY_EVENTS_URL and PAGERDUTY_CHANGE_EVENTS_URL):
    raise ImproperlyConfigured("PAGERDUTY_EVENTS_URL and PAGERDUTY_CHANGE_EVENTS_URL must not be empty")
# The webhook rules (docs/notifications.md): no notifier POSTs to a link-local address
# (169.254.0.0/16, fe80::/10) or a cloud's metadata address (fd00:ec2::254, 100.100.100.200,
# metadata.google.internal), where instances get their credentials, unless this is true. A URL
# naming one is refused here; audit/notifiers.py checks where each name resolves at every
# attempt.
WEBHOOK_ALLOW_LINK_LOCAL = env_bool("WEBHOOK_ALLOW_LINK_LOCAL", False)
_METADATA_NAMES = {"metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
_LINK_LOCAL_NETWORKS = tuple(
    ipaddress.ip_network(_network)
    for _network in ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")
)


def _link_local_host(url: str) -> str | None:
    """The host of ``url`` when it is a link-local or metadata address or name, else None."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in _METADATA_NAMES:
        return host
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return host if any(address in network for network in _LINK_LOCAL_NETWORKS) else None


if not WEBHOOK_ALLOW_LINK_LOCAL:
    for _name, _url in (
        ("ALERT_WEBHOOK_URL", ALERT_WEBHOOK_URL),
        ("NOTIFY_WEBHOOK_URL", NOTIFY_WEBHOOK_URL),
        ("SLACK_WEBHOOK_URL", SLACK_WEBHOOK_URL),
        ("PAGERDUTY_EVENTS_URL", PAGERDUTY_EVENTS_URL),
        ("PAGERDUTY_CHANGE_EVENTS_URL", PAGERDUTY_CHANGE_EVENTS_URL),
    ):
        if _host := _link_local_host(_url):
            # The host only: the rest of the URL may be a secret (Slack's is).
            raise ImproperlyConfigured(
                f"{_name} points at {_host}, a link-local or cloud metadata address, where webhooks are "
                "refused: set WEBHOOK_ALLOW_LINK_LOCAL=true only if that truly is the target"
            )
# Outgoing mail for ALERT_EMAILS (Django's SMTP backend).
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "controlplane@localhost")
# "Forgotten your password?" mails a reset link, so it is offered only where mail is set up:
# EMAIL_HOST given in the environment. Elsewhere /accounts/password_reset/ answers 404 with
# how an administrator sets a new password (`manage.py changepassword NAME`).
PASSWORD_RESET_ENABLED = bool(os.environ.get("EMAIL_HOST", "").strip())

# --- Publishing (docs/publishing.md) ---------------------------------------------------------
# On every change the worker writes each chain's signed document to a directory a static web
# server serves and/or to an S3-compatible bucket (presets/publishing.py), at
# <directory or bucket/prefix>/api/v1/chains/<name>. Empty: not published there.
PUBLISH_DIRECTORY = env_str("PUBLISH_DIRECTORY", "").strip()
if PUBLISH_DIRECTORY and not os.path.isabs(PUBLISH_DIRECTORY):
    raise ImproperlyConfigured(
        f"PUBLISH_DIRECTORY={PUBLISH_DIRECTORY!r} must be an absolute path (the directory the web server serves)"
    )
# Credentials come from boto3's own places (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, an
# AWS_PROFILE, an instance role); the region from PUBLISH_S3_REGION or AWS_DEFAULT_REGION.
PUBLISH_S3_BUCKET = env_str("PUBLISH_S3_BUCKET", "").strip()
PUBLISH_S3_PREFIX = env_str("PUBLISH_S3_PREFIX", "").strip().strip("/")
PUBLISH_S3_ENDPOINT_URL = env_str("PUBLISH_S3_ENDPOINT_URL", "").strip()
PUBLISH_S3_REGION = env_str("PUBLISH_S3_REGION", "").strip()
if PUBLISH_S3_BUCKET and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", PUBLISH_S3_BUCKET):
    raise ImproperlyConfigured(
        f"PUBLISH_S3_BUCKET={PUBLISH_S3_BUCKET!r} is not a bucket name: 3 to 63 lowercase letters, digits, "
        "dots and hyphens (the name alone, no s3:// and no path: the path goes in PUBLISH_S3_PREFIX)"
    )
if not PUBLISH_S3_BUCKET:
    for _name in ("PUBLISH_S3_PREFIX", "PUBLISH_S3_ENDPOINT_URL", "PUBLISH_S3_REGION"):
        if os.environ.get(_name, "").strip():
            raise ImproperlyConfigured(f"{_name} is set but PUBLISH_S3_BUCKET is not: name the bucket to publish to")
if PUBLISH_S3_ENDPOINT_URL and not PUBLISH_S3_ENDPOINT_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"PUBLISH_S3_ENDPOINT_URL={PUBLISH_S3_ENDPOINT_URL!r} must be an http:// or https:// URL "
        "(the S3-compatible server; unset for AWS)"
    )
# A publish that fails (the target down, the credentials refused) is retried: attempt n waits
# about PUBLISH_BACKOFF_SECONDS * 2**(n-1) (with jitter, at most 5 minutes) after the one
# before, up to PUBLISH_MAX_ATTEMPTS; each S3 request gives up after PUBLISH_TIMEOUT_SECONDS.
PUBLISH_MAX_ATTEMPTS = env_int("PUBLISH_MAX_ATTEMPTS", 10, minimum=1, maximum=100)
PUBLISH_BACKOFF_SECONDS = env_int("PUBLISH_BACKOFF_SECONDS", 5, minimum=1, maximum=3600)
PUBLISH_TIMEOUT_SECONDS = env_int("PUBLISH_TIMEOUT_SECONDS", 10, minimum=1, maximum=120)
# The beat also publishes every chain this often (nothing is written where the newest document
# already is), so a publish lost on the way (the broker down at the change, every retry spent,
# a bucket emptied) is made good; 0: only on changes and `manage.py publish`.
PUBLISH_EVERY_SECONDS = env_int("PUBLISH_EVERY_SECONDS", 300, minimum=0, maximum=86_400)

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
        "task": "worker.pins.expire_pins",
        "schedule": float(env_int("EXPIRE_PINS_EVERY_SECONDS", 15, minimum=1)),
    },
    # Planned pins start within this (presets/plans.py): the issue's bar is 15 s.
    "run-plans": {
        "task": "worker.pins.run_plans",
        "schedule": float(env_int("RUN_PLANS_EVERY_SECONDS", 5, minimum=1, maximum=15)),
    },
    "check-guards": {
        "task": "worker.tasks.check_guards",
        "schedule": float(env_int("GUARD_EVERY_SECONDS", 15, minimum=1, maximum=300)),
    },
    "alert-stale-pins": {
        "task": "worker.tasks.alert_stale_pins",
        "schedule": float(env_int("ALERT_STALE_PINS_EVERY_SECONDS", 60, minimum=1)),
    },
    "alert-providers": {
        "task": "worker.tasks.alert_providers",
        "schedule": float(env_int("PROVIDER_ALERTS_EVERY_SECONDS", 15, minimum=1)),
    },
    # Failover drills start, end and are judged within this (presets/drills.py, audit/drills.py).
    "run-drills": {
        "task": "worker.tasks.run_drills",
        "schedule": float(env_int("RUN_DRILLS_EVERY_SECONDS", 5, minimum=1, maximum=15)),
    },
    "prune-provider-health": {
        "task": "worker.tasks.prune_provider_health",
        "schedule": float(env_int("PRUNE_PROVIDER_HEALTH_EVERY_SECONDS", 600, minimum=1)),
    },
}
if (PUBLISH_DIRECTORY or PUBLISH_S3_BUCKET) and PUBLISH_EVERY_SECONDS:
    CELERY_BEAT_SCHEDULE["publish-chains"] = {
        "task": "worker.publishing.publish_chains",
        "schedule": float(PUBLISH_EVERY_SECONDS),
    }

# --- API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "http_api.authentication.ServiceTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["http_api.authentication.CanRead"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's, plus: too deep, NUL and lone surrogates are a 400 naming where (not a 500).
    "DEFAULT_PARSER_CLASSES": ["http_api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "http_api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "http_api.schema.ViewSchema",
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
    # Every record written during a request names it (request_id).
    "filters": {
        "refusals_on_one_line": {"()": "controlplane.log_filters.RefusalsOnOneLine"},
        "request_fields": {"()": "controlplane.log_filters.RequestFields"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["refusals_on_one_line", "request_fields"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# One line per request on `controlplane.access` (method, route, path, status_code,
# duration_ms, request_id) at INFO; on by default with LOG_FORMAT=json. A 4xx or 5xx Django
# answers is already its django.request line, which carries those fields instead. The read
# front's 200s and 304s (`controlplane.access.reads`: every SDK poll, where a line costs as
# much as the read) only with ACCESS_LOG_READS.
ACCESS_LOG = env_bool("ACCESS_LOG", LOG_FORMAT == "json")
ACCESS_LOG_READS = env_bool("ACCESS_LOG_READS", False)
if not ACCESS_LOG:
    LOGGING["loggers"]["controlplane.access"] = {"level": "WARNING"}  # type: ignore[index]
if not ACCESS_LOG_READS:
    LOGGING["loggers"]["controlplane.access.reads"] = {"level": "WARNING"}  # type: ignore[index]

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
# A Celery worker's task metrics: with a port, the worker serves them at
# http://<worker>:<port>/metrics (METRICS_TOKEN applies). Needed where the worker has a metrics
# directory of its own (a container); under `make run` it shares VAR_DIR/prometheus with the
# web process, whose /metrics shows them. 0: no server.
CELERY_METRICS_PORT = env_int("CELERY_METRICS_PORT", 0, minimum=0, maximum=65535)
