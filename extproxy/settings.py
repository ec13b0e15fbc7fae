"""extproxy settings: everything comes from the environment.

Embedded defaults (no variable set): SQLite in WAL mode under ./var, the in-memory channel
layer, the built-in policy answering alone. Production: DATABASE_URL (postgresql://...) and
EXTPROXY_REDIS_URL. Helpers fail loudly on a bad value instead of guessing.

Over 400 lines because every setting an operator can give is here once, with the comment that
says what it does; split by topic, an operator would have to search several files for one.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from urllib.parse import unquote, urlparse

from extproxy import datadir as _datadir
from extproxy import secret_key as _secret_key

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r}: expected true or false")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an integer") from None


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected a number") from None


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = envbool("EXTPROXY_DEBUG", False)
DATA_DIR = Path(os.environ.get("EXTPROXY_DATA_DIR", BASE_DIR / "var"))
# Never a fixed key: without the variable, one is generated into the data directory once.
SECRET_KEY = os.environ.get("EXTPROXY_SECRET_KEY") or _secret_key.load_or_create(DATA_DIR)
# The names the dashboard and API answer to (the extender endpoints bypass this check: the
# scheduler calls them by Service name). Loopback only unless set.
ALLOWED_HOSTS = envlist("EXTPROXY_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("EXTPROXY_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_filters",
    "channels",
    "django_htmx",
    "extproxy",
    "dashboard",
]

MIDDLEWARE = [
    "extproxy.probes.probe_paths_middleware",  # before anything that reads the Host (probes, scrapes)
    "extproxy.untrusted_https.untrusted_https_proxy_middleware",  # before the https redirect it explains
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "extproxy.csp.content_security_policy_middleware",
    "django_htmx.middleware.HtmxMiddleware",
    "extproxy.audit.audit_actor_middleware",
]

ROOT_URLCONF = "extproxy.urls"
ASGI_APPLICATION = "extproxy.asgi.application"

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
                "dashboard.record_status.context",
            ]
        },
    }
]


def _database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL: unsupported scheme {parsed.scheme!r} (use postgresql://)")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "extproxy",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        # Not kept between requests. Under ASGI each request's database work runs in a thread of
        # its own, and a connection kept open for reuse there is never reused: with 60 s, a test
        # server's API requests held up to 98 connections and PostgreSQL refused the next client
        # ("too many clients", the default max_connections is 100). The long-running
        # loops (recorder, shadow, roll-up) keep theirs: nothing closes it between their batches.
        "CONN_MAX_AGE": 0,
        # The pool checks a connection before it hands it out: after the server restarts, every
        # pooled connection is dead, and each would otherwise fail one request.
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {**_pool_options(), **_unreachable_limits()},
    }


def _unreachable_limits() -> dict:
    """How long a connection waits on a database host that stopped answering without refusing
    (a partition, a node gone): libpq's defaults wait 130 s to connect, and on an open connection
    for TCP's own retries (about 15 minutes). Meanwhile the recorder's loop and its reports stood
    still, and a request held its pooled connection. Keepalives find a silent peer of an idle
    connection, the user timeout one that leaves what was sent unacknowledged (or cannot send it:
    a peer whose window stays shut). EXTPROXY_DB_TCP_USER_TIMEOUT (seconds) sets that one; 0 leaves
    it to the kernel (TCP's retries, about 15 minutes; a shut window, for ever)."""
    limits = {"connect_timeout": envint("EXTPROXY_DB_CONNECT_TIMEOUT", 10),
              "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
    user_timeout = envfloat("EXTPROXY_DB_TCP_USER_TIMEOUT", 60.0)
    if not 0 <= user_timeout < 1e6:  # NaN and inf fail too
        raise ValueError(f"EXTPROXY_DB_TCP_USER_TIMEOUT={user_timeout}: expected seconds, 0 or more")
    if user_timeout:
        limits["tcp_user_timeout"] = max(1, round(user_timeout * 1000))  # libpq takes milliseconds
    return limits


def _pool_options() -> dict:
    """The serving process (asgi.py marks it before settings are read) takes its connections from
    a pool: at most EXTPROXY_DB_POOL_SIZE at once, however many requests run (a request past
    that waits for one up to EXTPROXY_DB_POOL_TIMEOUT seconds, then fails), and none is opened
    for a request (2.6 ms each on loopback). The other processes hold one connection a loop: in
    the recorder, a pool would wait out its timeout on every try while the database is away."""
    import extproxy

    if not getattr(extproxy, "SERVING_PROCESS", False):
        return {}
    timeout = envfloat("EXTPROXY_DB_POOL_TIMEOUT", 5.0)
    # While the database is away the pool retries with a doubling delay (1, 2, 4, 8 s ...), for
    # 5 minutes by default, so its next try can come as long after the database is back as the
    # outage has lasted: after a 10 s outage the pages still answered 503. Retrying no longer
    # than a request waits, it gives up, and the next request starts a new try at once.
    options: dict = {"pool": {"min_size": 1, "max_size": envint("EXTPROXY_DB_POOL_SIZE", 20), "timeout": timeout,
                              "reconnect_timeout": timeout}}
    # The server's half of the serving process's statement bound (extproxy/statement_bound.py):
    # a wait on a lock is ended by the server at the deadline. A bad value is refused below.
    deadline = envfloat("EXTPROXY_DB_STATEMENT_DEADLINE", 60.0)
    if 0 < deadline < 1e6:
        options["options"] = f"-c statement_timeout={max(1, round(deadline * 1000))}"
    return options


# The secret key, the export signing key, the spool, and SQLite's database (token keys): for
# extproxy's user only, an existing directory too.
_datadir.keep_private(DATA_DIR, None if os.environ.get("DATABASE_URL") else
                      Path(os.environ.get("EXTPROXY_SQLITE_PATH", str(DATA_DIR / "extproxy.sqlite3"))))
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": _database_from_url(os.environ["DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("EXTPROXY_SQLITE_PATH", str(DATA_DIR / "extproxy.sqlite3")),
            # WAL lets the dashboard read while the recorder writes; busy timeout rides out
            # the short write locks of batched inserts. The WAL is copied back into the database
            # (with an fsync) every 8,000 pages instead of SQLite's 1,000: at 200,000 calls in the
            # table the recorder drained 15-23 % more calls a second (bench/README.md, sixteenth
            # pass). After a checkpoint the WAL file is cut back to 64 MiB at most.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                                "PRAGMA wal_autocheckpoint=8000; PRAGMA journal_size_limit=67108864;",
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
            },
            "TEST": {"NAME": os.environ.get("EXTPROXY_TEST_SQLITE_PATH") or None},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("EXTPROXY_REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [os.environ["EXTPROXY_REDIS_URL"]]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS: list = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns at start-up when it is missing
# Served by the app itself from the apps' static folders: no collectstatic step to forget.
WHITENOISE_USE_FINDERS = True
# Under ASGI, Django warns on every static file whitenoise streams (a sync iterator): known, harmless.
warnings.filterwarnings("ignore", "StreamingHttpResponse must consume synchronous iterators")
# The chart library, installed from the npm registry by `npm ci` (make setup); never vendored.
STATICFILES_DIRS = [("uplot", BASE_DIR / "node_modules" / "uplot" / "dist")]
WHITENOISE_AUTOREFRESH = DEBUG
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    # Token first: an unauthenticated request then gets 401 with `WWW-Authenticate: Token`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "extproxy.api.token_age.ExpiringTokenAuthentication",  # DRF's, with EXTPROXY_TOKEN_MAX_AGE
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["extproxy.api.permissions.CanViewCalls"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON nested too deeply is a 400, not a 500 (api/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["extproxy.api.parsers.BoundedJSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_RATES": {"auth-token": os.environ.get("EXTPROXY_TOKEN_RATE", "30/min")},
}

SPECTACULAR_SETTINGS = {
    "TITLE": "extproxy API",
    "DESCRIPTION": "Recorded kube-scheduler extender calls. Token auth: POST /api/auth/token/.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["extproxy.api.permissions.CanViewCalls"],
}

# The backend configuration file (KubeSchedulerConfiguration or extproxy's own); empty: the
# built-in policy answers alone.
EXTPROXY_CONFIG = os.environ.get("EXTPROXY_CONFIG", "")
# Largest extender request body accepted (413 above it). Full-object mode posts every Node.
EXTPROXY_MAX_BODY_BYTES = envint("EXTPROXY_MAX_BODY_BYTES", 64 * 1024 * 1024)
# Seconds an extender request's body may take to arrive in full (408 after it): a client that
# sends a few bytes at a time must not hold a connection and its buffer for ever.
EXTPROXY_BODY_TIMEOUT = envfloat("EXTPROXY_BODY_TIMEOUT", 30.0)

# Largest request body the dashboard, admin and API take (413 above it, before it is read:
# ui_body_bound.py). None of them takes more than a form or a replay's selection.
EXTPROXY_MAX_UI_BODY_BYTES = envint("EXTPROXY_MAX_UI_BODY_BYTES", 4 * 1024 * 1024)
# Largest request head (request line and headers) the main port reads: 431 and the connection
# closed above it (header_bound.py). A browser's is a few KiB, kube-scheduler's a few hundred bytes.
EXTPROXY_MAX_HEADER_BYTES = envint("EXTPROXY_MAX_HEADER_BYTES", 64 * 1024)
# Connections the main port holds open at once, websockets included (connection_bound.py); one
# more is answered 503 and closed at once. A browser tab takes up to 7 (6 + its live socket).
# 0 = no bound. The extender listener has its own: EXTPROXY_EXTENDER_MAX_CONNECTIONS.
EXTPROXY_MAX_CONNECTIONS = envint("EXTPROXY_MAX_CONNECTIONS", 1000)

# --- hot path (issue 8b) ---
# Most of one backend reply kept in memory for recording and combining. Per-backend form: a
# larger reply is streamed through to the scheduler and only its first part is recorded (finding
# reply-truncated); combined form: a larger reply is that backend's failed call.
EXTPROXY_MAX_REPLY_BYTES = envint("EXTPROXY_MAX_REPLY_BYTES", 64 * 1024 * 1024)
# Buffers up to this many bytes are reused from the heap rather than mapped and unmapped per call
# (heap.py: a full-object call's bodies page-faulted ~8 ms of kernel time per call); up to twice
# this much freed memory is kept for reuse. 0 leaves the C library's own behaviour.
EXTPROXY_HEAP_KEEP_BYTES = envint("EXTPROXY_HEAP_KEEP_BYTES", 32 * 1024 * 1024)
# Every this many seconds, free heap memory that a passing peak left resident is handed back to
# the kernel (heap.py, HeapTrimmer); 0: never (only what glibc returns by itself).
EXTPROXY_HEAP_TRIM_SECONDS = envfloat("EXTPROXY_HEAP_TRIM_SECONDS", 10.0)
# Combined calls with a request at least this large are decoded and combined on a worker thread,
# so that the event loop keeps serving other calls (and their timeouts) meanwhile.
EXTPROXY_OFFLOAD_BYTES = envint("EXTPROXY_OFFLOAD_BYTES", 1024 * 1024)
# The extender listener (listener.py): POST /extender/... on its own port, without the ASGI
# layers. 0 = none: the main port serves /extender/. Set, the main port answers 404 for
# /extender/ (asgi.py), so that the scheduler's port is the only way in.
EXTPROXY_EXTENDER_PORT = envint("EXTPROXY_EXTENDER_PORT", 0)
EXTPROXY_EXTENDER_HOST = os.environ.get("EXTPROXY_EXTENDER_HOST") or os.environ.get("HOST") or "127.0.0.1"
# Connections the extender listener holds open at once (kube-scheduler keeps a few alive per
# replica); one more is answered 503 and closed at once. 0 = no bound.
EXTPROXY_EXTENDER_MAX_CONNECTIONS = envint("EXTPROXY_EXTENDER_MAX_CONNECTIONS", 1000)
# The probe port (probe_port.py): GET /healthz and /readyz only, for kubelet, so that a flood of
# the main port's connections cannot fail liveness and restart the pod. 0 = none (the main port's
# /healthz and /readyz are served either way).
EXTPROXY_PROBE_PORT = envint("EXTPROXY_PROBE_PORT", 0)
EXTPROXY_PROBE_HOST = os.environ.get("EXTPROXY_PROBE_HOST") or os.environ.get("HOST") or "127.0.0.1"
# Its connections open at once: kubelet opens one per probe and closes it (2-3 at a time at most).
EXTPROXY_PROBE_MAX_CONNECTIONS = envint("EXTPROXY_PROBE_MAX_CONNECTIONS", 8)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("EXTPROXY_LOG_LEVEL", "INFO")},
    # A request that failed because the database is away: one line a minute, not a traceback each.
    "filters": {"database_outage": {"()": "extproxy.database_down.OutageLogFilter"},
                "pool_warnings": {"()": "extproxy.database_down.PoolLogFilter"}},
    "loggers": {"django.request": {"filters": ["database_outage"]}, "psycopg.pool": {"filters": ["pool_warnings"]}},
}

# --- exports (issue 12) ---
# The Ed25519 private key (PEM) signing export manifests. Unset: one generated once into DATA_DIR
# (export-signing.pem). Several replicas must share one key: set it (from a Secret).
EXTPROXY_EXPORT_SIGNING_KEY = os.environ.get("EXTPROXY_EXPORT_SIGNING_KEY", "")
# Public keys this server also trusts when it verifies a file: another replica's, or the key
# before a rotation. PEM (as `manage.py export_signing_key` prints it) or base64 (the API's
# `public_key`), separated by commas or whitespace (exportsigning.trusted_keys).
EXTPROXY_EXPORT_TRUSTED_KEYS = os.environ.get("EXTPROXY_EXPORT_TRUSTED_KEYS", "")
# The HMAC secret of version 1 manifests (before Ed25519), used only to verify them; unset: the
# data directory's export-hmac.key, where one was made.
EXTPROXY_EXPORT_KEY = os.environ.get("EXTPROXY_EXPORT_KEY", "")
# The node index behind the API's `node` filter (models.NodeSet), written with every call: one
# integer per call, one row per pair per distinct set (figures in the README). Off, the `node`
# filter answers 400 saying so.
EXTPROXY_NODE_INDEX = envbool("EXTPROXY_NODE_INDEX", True)

# --- dashboard (issue 10) ----------------------------------------------------------------
# Calls a live connection may fall behind by before it is sent a reset (and refetches).
EXTPROXY_LIVE_BUFFER = envint("EXTPROXY_LIVE_BUFFER", 5000)
# How often a live connection sends what it collected, in milliseconds.
EXTPROXY_LIVE_FLUSH_MS = envint("EXTPROXY_LIVE_FLUSH_MS", 100)
# Seconds between the live socket's round trips through the channel layer (dashboard/consumers.py).
EXTPROXY_LIVE_ECHO_SECONDS = float(os.environ.get("EXTPROXY_LIVE_ECHO_SECONDS", "15"))
# Pods with no scheduling attempt in this many minutes are not listed as pending.
EXTPROXY_PENDING_MINUTES = envint("EXTPROXY_PENDING_MINUTES", 15)

# --- security (issue 9) ---
# EXTPROXY_HTTPS: the dashboard and API are reached over https (uvicorn's own TLS, or a proxy that
# terminates TLS and sends X-Forwarded-Proto to a uvicorn that trusts it: --forwarded-allow-ips).
# It turns on secure cookies, HSTS and the redirect to https; each can be set on its own too.
HTTPS = envbool("EXTPROXY_HTTPS", False)
SESSION_COOKIE_SECURE = envbool("EXTPROXY_SECURE_COOKIES", HTTPS)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_HSTS_SECONDS = envint("EXTPROXY_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("EXTPROXY_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = envbool("EXTPROXY_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = envbool("EXTPROXY_SSL_REDIRECT", HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # kubelet probes speak plain http
X_FRAME_OPTIONS = "DENY"
# Sent on every dashboard, admin and API response; "" turns it off. Styles allow inline
# attributes (the pod timeline's bar widths); scripts come only from our own static files.
EXTPROXY_CSP = os.environ.get(
    "EXTPROXY_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)
# Preloading is a commitment an operator makes by submitting the domain, never a default.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# Failed log-ins (login form, admin, POST /api/auth/token/) per client address and per user name
# within the window; above it the answer is 429 with Retry-After.
EXTPROXY_LOGIN_FAILURES = envint("EXTPROXY_LOGIN_FAILURES", 10)
EXTPROXY_LOGIN_WINDOW = envint("EXTPROXY_LOGIN_WINDOW", 300)
# Seconds an API token works after it is issued (its `created`); then 401 "token expired" until
# a new log-in (POST /api/auth/token/) or `manage.py token NAME --rotate` replaces it. 0 = no limit.
EXTPROXY_TOKEN_MAX_AGE = envint("EXTPROXY_TOKEN_MAX_AGE", 30 * 24 * 3600)
# Throttle counters: shared by the replicas through Redis when there is one.
if os.environ.get("EXTPROXY_REDIS_URL"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["EXTPROXY_REDIS_URL"],
            "KEY_PREFIX": os.environ.get("EXTPROXY_CACHE_PREFIX", "extproxy"),
            # A hung Redis holds a log-in for at most this long (throttle_store then counts locally).
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }

# --- extender endpoint protection (issue 9) ---
# The extender endpoints (extender_access.py): on their own port when EXTPROXY_EXTENDER_PORT is
# set (the main port then answers 404 for /extender/), callable only from the sources in
# EXTPROXY_EXTENDER_ALLOW (CIDRs; loopback by default; "*" for any), and on that port with TLS
# and a client certificate verified against EXTPROXY_EXTENDER_TLS_CLIENT_CA when those are set.
# (EXTPROXY_EXTENDER_PORT and _HOST: in the listener's section above.)
EXTPROXY_EXTENDER_ALLOW = os.environ.get("EXTPROXY_EXTENDER_ALLOW", "127.0.0.0/8,::1/128")
EXTPROXY_EXTENDER_TLS_CERT = os.environ.get("EXTPROXY_EXTENDER_TLS_CERT", "")
EXTPROXY_EXTENDER_TLS_KEY = os.environ.get("EXTPROXY_EXTENDER_TLS_KEY", "")
EXTPROXY_EXTENDER_TLS_CLIENT_CA = os.environ.get("EXTPROXY_EXTENDER_TLS_CLIENT_CA", "")
# With a client CA: the names (subject CN, or a DNS, URI or IP subjectAltName) one of which the
# client's certificate must carry, comma-separated; "" admits any certificate the CA signed.
EXTPROXY_EXTENDER_TLS_CLIENT_NAMES = os.environ.get("EXTPROXY_EXTENDER_TLS_CLIENT_NAMES", "")

# --- recording (issue 8a): the spool between the serving process and the recorder process ---
# README "How recording works" explains each. Sizes in bytes, times in seconds.
EXTPROXY_SPOOL_DIR = os.environ.get("EXTPROXY_SPOOL_DIR") or str(DATA_DIR / "spool")
# A bound, not an allocation: the spool takes only what the recorder has not stored yet. 4 GiB
# holds ~1.8 million deflated names-mode calls: five minutes at ~6,000 calls/s, the fastest this
# build served on one core shared with the recorder, which wrote almost nothing meanwhile
# (bench/README.md, "Fifth pass").
EXTPROXY_SPOOL_MAX_BYTES = envint("EXTPROXY_SPOOL_MAX_BYTES", 4 << 30)
EXTPROXY_SPOOL_SEGMENT_BYTES = envint("EXTPROXY_SPOOL_SEGMENT_BYTES", 8 << 20)
# A segment whose first record is this old is finished even when not full (0: by size only):
# its bodies, unredacted, leave the disk once it is stored (README, "The spool").
EXTPROXY_SPOOL_SEGMENT_SECONDS = float(os.environ.get("EXTPROXY_SPOOL_SEGMENT_SECONDS") or 60.0)
if EXTPROXY_SPOOL_SEGMENT_SECONDS < 0:
    raise ValueError(f"EXTPROXY_SPOOL_SEGMENT_SECONDS={EXTPROXY_SPOOL_SEGMENT_SECONDS}: expected 0 or more")
# Deflate each call's record before it is spooled (recording/trace.py): 2.7-20x more calls fit.
EXTPROXY_SPOOL_COMPRESS = envbool("EXTPROXY_SPOOL_COMPRESS", True)
# ...records under 256 KiB only once the spool holds this many bytes (the recorder is behind); 0: always.
EXTPROXY_SPOOL_COMPRESS_ABOVE = envint("EXTPROXY_SPOOL_COMPRESS_ABOVE", 32 << 20)
EXTPROXY_SPOOL_FSYNC = os.environ.get("EXTPROXY_SPOOL_FSYNC") or "interval"
if EXTPROXY_SPOOL_FSYNC not in ("always", "interval", "never"):
    raise ValueError(f"EXTPROXY_SPOOL_FSYNC={EXTPROXY_SPOOL_FSYNC!r}: expected always, interval or never")
EXTPROXY_SPOOL_FSYNC_INTERVAL = float(os.environ.get("EXTPROXY_SPOOL_FSYNC_INTERVAL") or 1.0)
EXTPROXY_SPOOL_WRITER = os.environ.get("EXTPROXY_SPOOL_WRITER") or "serve"
# The recorder counts what a killed serving process left in a spool directory that no serving
# process claims again, once two of its checks this far apart found it so (recording/abandoned.py).
EXTPROXY_SPOOL_ABANDONED_SECONDS = float(os.environ.get("EXTPROXY_SPOOL_ABANDONED_SECONDS") or 30.0)
# Finished segments the recorder keeps (renamed .free) for the serving process to overwrite
# instead of filling new files; 0: it deletes them.
EXTPROXY_SPOOL_RECYCLE_SEGMENTS = envint("EXTPROXY_SPOOL_RECYCLE_SEGMENTS", 4)
if EXTPROXY_SPOOL_RECYCLE_SEGMENTS < 0:
    raise ValueError(f"EXTPROXY_SPOOL_RECYCLE_SEGMENTS={EXTPROXY_SPOOL_RECYCLE_SEGMENTS}: expected 0 or more")
EXTPROXY_HANDOFF_BYTES = envint("EXTPROXY_HANDOFF_BYTES", 256 << 20)
EXTPROXY_SHUTDOWN_FLUSH_SECONDS = float(os.environ.get("EXTPROXY_SHUTDOWN_FLUSH_SECONDS") or 5.0)
EXTPROXY_RECORDER_NICE = envint("EXTPROXY_RECORDER_NICE", 10)
# PostgreSQL: seconds one recorder transaction (a batch, a check) may take before it is given up
# as an outage (recording/deadline.py): a server that takes every byte and never answers fires
# neither keepalives nor the TCP user timeout. 0 = no bound.
EXTPROXY_DB_STATEMENT_DEADLINE = envfloat("EXTPROXY_DB_STATEMENT_DEADLINE", 60.0)
if not 0 <= EXTPROXY_DB_STATEMENT_DEADLINE < 1e6:  # NaN and inf fail too
    raise ValueError(f"EXTPROXY_DB_STATEMENT_DEADLINE={os.environ.get('EXTPROXY_DB_STATEMENT_DEADLINE')!r}: "
                     "expected seconds, 0 (no bound) or more")
# Every dashboard page warns once the oldest call not yet stored is this old (the recorder is
# behind), and refreshes that warning every EXTPROXY_RECORD_STATUS_POLL_SECONDS.
EXTPROXY_RECORD_BEHIND_SECONDS = envfloat("EXTPROXY_RECORD_BEHIND_SECONDS", 10.0)
EXTPROXY_RECORD_STATUS_POLL_SECONDS = envint("EXTPROXY_RECORD_STATUS_POLL_SECONDS", 15)
if EXTPROXY_RECORD_STATUS_POLL_SECONDS < 1:  # htmx would not poll at all
    raise ValueError(f"EXTPROXY_RECORD_STATUS_POLL_SECONDS={EXTPROXY_RECORD_STATUS_POLL_SECONDS}: expected 1 or more")
# The recorder process under SCHED_IDLE (runs only when its core is otherwise idle); 0 = off.
EXTPROXY_RECORDER_SCHED_IDLE = envint("EXTPROXY_RECORDER_SCHED_IDLE", 1) != 0
# The shadow process (manage.py shadow): niceness increment; it also asks for SCHED_IDLE.
EXTPROXY_SHADOW_NICE = envint("EXTPROXY_SHADOW_NICE", 10)
# A queued or running replay run whose process shows no sign of life this long is taken up by
# another process (queued) or marked failed (running): replay/worker.py.
EXTPROXY_REPLAY_STALE_SECONDS = float(os.environ.get("EXTPROXY_REPLAY_STALE_SECONDS") or 60)
