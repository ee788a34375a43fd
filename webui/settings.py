"""Settings, read from the environment.

With nothing set: the embedded default (SQLite, in-memory channel layer, inline execution).
With DATABASE_URL and REDIS_URL: PostgreSQL, Redis as Celery broker and channel layer, Celery
execution. See README.md for every variable.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not DATABASE_URL

DEBUG = env_flag("DJANGO_DEBUG")
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not EMBEDDED:
        raise ImproperlyConfigured(
            "Set DJANGO_SECRET_KEY: it is required outside the embedded demo."
        )
    SECRET_KEY = "embedded-demo-only-not-secret"

ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(
        ","
    )
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "channels",
    "orchestrator",
    "webui",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# A busy database (pool exhausted, too many clients) answers 503 with Retry-After, never 500.
MIDDLEWARE = [*MIDDLEWARE, "webui.middleware.DatabaseBusyMiddleware"]

ROOT_URLCONF = "webui.urls"
ASGI_APPLICATION = "webui.asgi.application"

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
                "webui.projects.project_nav",
            ],
        },
    },
]

if DATABASE_URL:
    # No persistent per-request connections (conn_max_age=0): the web process borrows from a
    # bounded pool instead; see "Database connections" below.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            # A run writes from the server's threads while pages read: wait instead of failing.
            # WAL lets pages read while a run writes; in WAL mode synchronous=NORMAL stays
            # consistent after a crash and saves an fsync per commit.
            # IMMEDIATE: a write transaction takes the lock when it begins and waits its turn,
            # instead of failing with "database is locked" when two runs write at once.
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Database connections: bounded ---------------------------------------------------------------
# On PostgreSQL each web process keeps a pool of at most CONDUCTOR_DB_POOL_MAX_SIZE connections,
# whatever the number of clients: a request borrows one for its duration and waits up to
# CONDUCTOR_DB_POOL_TIMEOUT seconds for a free one, then gets a 503 with Retry-After
# (webui.middleware). Celery workers turn the pool off when they start (webui/celery.py): a
# worker process holds one connection at most. A deployment needs at most
# web processes x CONDUCTOR_DB_POOL_MAX_SIZE + total Celery concurrency connections (README).
CONDUCTOR_DB_POOL_MIN_SIZE = int(os.environ.get("CONDUCTOR_DB_POOL_MIN_SIZE", "2"))
# Small on purpose: a Daphne process runs Python on one core at a time, so more connections add
# threads that contend with the event loop (which carries the websockets), not throughput.
CONDUCTOR_DB_POOL_MAX_SIZE = int(os.environ.get("CONDUCTOR_DB_POOL_MAX_SIZE", "4"))
# Long enough that an overloaded server answers slowly before it refuses (psycopg's default).
CONDUCTOR_DB_POOL_TIMEOUT = float(os.environ.get("CONDUCTOR_DB_POOL_TIMEOUT", "30"))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    if CONDUCTOR_DB_POOL_MAX_SIZE > 0:
        # With a pool, health checks make the pool check a connection before handing it out: one
        # the server dropped (restart, idle timeout) is replaced, not given to a request.
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(CONDUCTOR_DB_POOL_MIN_SIZE, CONDUCTOR_DB_POOL_MAX_SIZE),
            "max_size": CONDUCTOR_DB_POOL_MAX_SIZE,
            "timeout": CONDUCTOR_DB_POOL_TIMEOUT,
        }
    # A Celery worker keeps its one connection across tasks and closes it only when it failed
    # (webui/celery.py); Celery's Django fixup would close it after every task (a new
    # PostgreSQL backend per run). It closes connections only every 2 x this many tasks.
    CELERY_DB_REUSE_MAX = 2**30
    # Behind PgBouncer in transaction mode a server-side cursor cannot outlive its transaction.
    if env_flag("CONDUCTOR_DB_TRANSACTION_POOLER"):
        DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# The statements that store a run as it executes are prepared on PostgreSQL, once per connection
# (parsing and planning them cost the server more than running them). Not behind PgBouncer in
# transaction mode: a statement prepared on one server connection is not there on the next.
CONDUCTOR_DB_PREPARED_STATEMENTS = not env_flag("CONDUCTOR_DB_TRANSACTION_POOLER")
if CONDUCTOR_DB_PREPARED_STATEMENTS and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # psycopg prepares a statement that asks for it only once a threshold is set (Django sets
    # none). Django's own cursors bind on the client and never ask; this one is never reached.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
# With CONDUCTOR_DB_ASYNC_PROGRESS, a run's progress (its plans, step starts and results, stored
# together as it executes) is committed on PostgreSQL without waiting for the disk: a crash of
# the database server can then lose its last fraction of a second (the run resumes from what was
# kept, as after a worker's crash, and may call a step's model again; events clients were sent
# from what was lost are then numbered again). Its end always waits for the disk, and so keeps
# everything stored before it. (A run's claim never waits: see services/runs.py.)
CONDUCTOR_DB_ASYNC_PROGRESS = env_flag("CONDUCTOR_DB_ASYNC_PROGRESS")
# --- end of database connections -----------------------------------------------------------------

if REDIS_URL:
    CHANNEL_LAYER_SOCKET_TIMEOUT = float(os.environ.get("CONDUCTOR_LAYER_SOCKET_TIMEOUT", "20"))
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "webui.layers.RedisChannelLayer",
            # redis-py 8 caps a pool at 100 connections and raises past it; a crowd of sockets
            # joining their groups at once (1,000 in bench/live_fanout.py) needs more than that.
            # It also gives up on a connect or a read after 5 s by default: a busy event loop
            # (hundreds of sockets joining within seconds) can take that long to run the
            # connect's callbacks, and channels_redis's blocking reads wait 5 s themselves. The
            # consumer retries a failed group join with backoff (webui.consumers).
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "max_connections": 1000,
                        "socket_connect_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                        "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                    }
                ]
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# How runs execute: "inline" (a task on the server's own event loop) or "celery".
# A holder of a concurrency slot (a model call of a bounded worker or conductor, held in Redis)
# renews it every third of this; a process that dies frees its slots after it.
CONDUCTOR_SLOT_TTL_SECONDS = float(os.environ.get("CONDUCTOR_SLOT_TTL_SECONDS", "30"))
CONDUCTOR_EXECUTION = os.environ.get("CONDUCTOR_EXECUTION", "celery" if REDIS_URL else "inline")
if CONDUCTOR_EXECUTION not in {"inline", "celery"}:
    raise ImproperlyConfigured("CONDUCTOR_EXECUTION must be 'inline' or 'celery'.")
if CONDUCTOR_EXECUTION == "celery" and not REDIS_URL:
    raise ImproperlyConfigured("CONDUCTOR_EXECUTION=celery needs REDIS_URL (the broker).")

# The address pages link to (the CLI prints run URLs with it).
CONDUCTOR_BASE_URL = os.environ.get("CONDUCTOR_BASE_URL", "http://127.0.0.1:8000")

# Code grading runs references and answers in a bubblewrap sandbox, never outside it. "off"
# refuses code grading outright; "on" grades when the sandbox works here and refuses when not.
CONDUCTOR_CODE_GRADING = os.environ.get("CONDUCTOR_CODE_GRADING", "on").strip().lower()
if CONDUCTOR_CODE_GRADING not in {"on", "off"}:
    raise ImproperlyConfigured("CONDUCTOR_CODE_GRADING must be 'on' or 'off'.")

# Celery: a run is one long task, acknowledged only when it returns (a dead worker's run is
# delivered again and resumed), and a worker process reserves one run at a time.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
# Deployments (and test runs) sharing one Redis keep their runs apart with their own queue.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CONDUCTOR_CELERY_QUEUE", "celery")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Seconds a delivered, unacknowledged run may take before Redis hands it to another worker
# (how soon a dead worker's run resumes). Longer runs get a second delivery, which the per-run
# lease below turns away while the first worker is alive.
CONDUCTOR_VISIBILITY_TIMEOUT = int(os.environ.get("CONDUCTOR_VISIBILITY_TIMEOUT", "3600"))
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CONDUCTOR_VISIBILITY_TIMEOUT,
    # Look for abandoned deliveries about ten times per timeout (kombu's default: every 100 s).
    "unacked_restore_interval": max(1, min(60, CONDUCTOR_VISIBILITY_TIMEOUT // 10)),
    "unacked_restore_throttle": 1,
}
# Seconds a worker's claim on a run outlives the worker (renewed every third of it while alive).
CONDUCTOR_RUN_LEASE_SECONDS = float(os.environ.get("CONDUCTOR_RUN_LEASE_SECONDS", "60"))
if CONDUCTOR_RUN_LEASE_SECONDS >= CONDUCTOR_VISIBILITY_TIMEOUT:
    raise ImproperlyConfigured(
        "CONDUCTOR_RUN_LEASE_SECONDS must be shorter than CONDUCTOR_VISIBILITY_TIMEOUT."
    )

# Recovery: a run whose executing process died this many times (SIGKILL, out of memory, a lost
# machine) is failed with that reason instead of being resumed again. The lease above is also
# how long an inline run's claim outlives a killed server before another start resumes it.
CONDUCTOR_RUN_MAX_INTERRUPTIONS = int(os.environ.get("CONDUCTOR_RUN_MAX_INTERRUPTIONS", "3"))
if CONDUCTOR_RUN_MAX_INTERRUPTIONS < 1 or CONDUCTOR_RUN_LEASE_SECONDS <= 0:
    raise ImproperlyConfigured(
        "CONDUCTOR_RUN_MAX_INTERRUPTIONS must be at least 1 and CONDUCTOR_RUN_LEASE_SECONDS "
        "above 0."
    )

# --- Lost runs -----------------------------------------------------------------------------------
# A run still queued this long after its creation is handed to Celery again (its message was
# lost); Celery workers look for such runs every CONDUCTOR_SWEEP_INTERVAL_SECONDS (0: never).
CONDUCTOR_QUEUED_DEADLINE_SECONDS = float(
    os.environ.get("CONDUCTOR_QUEUED_DEADLINE_SECONDS", "300")
)
CONDUCTOR_SWEEP_INTERVAL_SECONDS = float(os.environ.get("CONDUCTOR_SWEEP_INTERVAL_SECONDS", "60"))
# --- end of lost runs ----------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Conductor Studio API",
    "DESCRIPTION": "Runs, steps and graphs of conductor workflows.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"LiteLLM": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# Bounded input -----------------------------------------------------------------------------------
# The longest question or reference a run accepts, in UTF-8 bytes (refused with a 400 naming it).
CONDUCTOR_MAX_TEXT_BYTES = int(os.environ.get("CONDUCTOR_MAX_TEXT_BYTES", str(100 * 1024)))
# A larger request body is refused with a 413 before it is parsed. Room for a question and a
# reference at the limit even when every character arrives JSON-escaped (six bytes each).
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, 13 * CONDUCTOR_MAX_TEXT_BYTES)
REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"] = ["webui.api.parsers.BoundedJSONParser"]
REST_FRAMEWORK["EXCEPTION_HANDLER"] = "webui.api.errors.exception_handler"
SPECTACULAR_SETTINGS["PATH_CONVERTER_OVERRIDES"] = {
    "id": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
}
# The compare API's change kinds are one enum, however many fields use them.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] = {"ChangeKindEnum": "orchestrator.wire.CHANGE_KINDS"}
# Batches, the runs filter and steps each have a "status" enum: one name each.
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update(
    {
        "BatchStatusEnum": "orchestrator.services.batches.BATCH_STATUSES",
        "RunStatusEnum": "orchestrator.models.Run.Status",
        "StepStatusEnum": "orchestrator.models.Step.Status",
        "VerdictEnum": "orchestrator.verdicts.VERDICTS",
    }
)
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = [
    "drf_spectacular.hooks.postprocess_schema_enums",
    "webui.api.schema.document_error_responses",
]

# --- Site hardening: login throttling, Content-Security-Policy, HTTPS (README: Production) ---
# After CONDUCTOR_LOGIN_FAILURE_LIMIT wrong passwords for one username from one address
# (CONDUCTOR_LOGIN_LOCKOUT: comma-separated alternatives, "+" joins a combination), logins for
# it from there fail, the right password too, until CONDUCTOR_LOGIN_COOLOFF_SECONDS have passed.
INSTALLED_APPS += ["axes"]
MIDDLEWARE += ["csp.middleware.CSPMiddleware", "axes.middleware.AxesMiddleware"]
AUTHENTICATION_BACKENDS = [
    "webui.throttling.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_flag("CONDUCTOR_LOGIN_THROTTLING", True)
AXES_FAILURE_LIMIT = int(os.environ.get("CONDUCTOR_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(
    seconds=float(os.environ.get("CONDUCTOR_LOGIN_COOLOFF_SECONDS", "900"))
)
AXES_LOCKOUT_PARAMETERS = [
    [name.strip() for name in combination.split("+")]
    for combination in os.environ.get("CONDUCTOR_LOGIN_LOCKOUT", "username+ip_address").split(",")
]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"

# Every page: no inline script or style, nothing from another origin; the live socket is ours.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'", "ws:", "wss:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Behind HTTPS: DJANGO_HTTPS=1 turns every one of these on (HSTS for a year, subdomains and
# preload included); each can also be set on its own. DJANGO_SECURE_PROXY_SSL_HEADER=1 trusts
# X-Forwarded-Proto from the proxy in front (set it only when that proxy always sets it).
behind_https = env_flag("DJANGO_HTTPS")
SECURE_SSL_REDIRECT = env_flag("DJANGO_SECURE_SSL_REDIRECT", behind_https)
SECURE_HSTS_SECONDS = int(
    os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "31536000" if behind_https else "0")
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", behind_https)
SECURE_HSTS_PRELOAD = env_flag("DJANGO_SECURE_HSTS_PRELOAD", behind_https)
SESSION_COOKIE_SECURE = env_flag("DJANGO_SESSION_COOKIE_SECURE", behind_https)
CSRF_COOKIE_SECURE = env_flag("DJANGO_CSRF_COOKIE_SECURE", behind_https)
if env_flag("DJANGO_SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# OpenAI-compatible endpoint (/v1) and telemetry ---------------------------------------------
# How many calls through /v1 may nest (a pool whose worker is a pool of this server); deeper
# calls are refused, which stops a pool that calls itself.
CONDUCTOR_MAX_DEPTH = int(os.environ.get("CONDUCTOR_MAX_DEPTH", "3"))
# Requests per minute one API key may make to /v1 (429 beyond).
CONDUCTOR_API_RATE_LIMIT = int(os.environ.get("CONDUCTOR_API_RATE_LIMIT", "600"))
# OpenTelemetry: with OTEL_EXPORTER_OTLP_ENDPOINT set, each finished run is exported as a
# trace (OTLP/HTTP). Messages and responses go into spans only with this flag on.
CONDUCTOR_OTEL_CAPTURE_MESSAGES = env_flag("CONDUCTOR_OTEL_CAPTURE_MESSAGES")
# Training export: the reward of a decision whose workflow parsed but whose answer is wrong
# (score 0); a right answer is worth 1, an unparsable workflow 0.
CONDUCTOR_EXPORT_PARTIAL_CREDIT = float(os.environ.get("CONDUCTOR_EXPORT_PARTIAL_CREDIT", "0.5"))

# --- Datasets and experiments ---
# An imported dataset file is at most CONDUCTOR_DATASET_MAX_BYTES, with at most
# CONDUCTOR_DATASET_MAX_ITEMS items; an experiment is at most CONDUCTOR_EXPERIMENT_MAX_TRIALS
# runs (items × arms). Celery executes an experiment in CONDUCTOR_EXPERIMENT_SLICES tasks that
# share its trials; inline, CONDUCTOR_EXPERIMENT_CONCURRENCY trials run at a time. A trial whose
# execution died is taken again after a run lease (CONDUCTOR_RUN_LEASE_SECONDS), or on resume.
CONDUCTOR_DATASET_MAX_BYTES = int(os.environ.get("CONDUCTOR_DATASET_MAX_BYTES", str(5 * 2**20)))
CONDUCTOR_DATASET_MAX_ITEMS = int(os.environ.get("CONDUCTOR_DATASET_MAX_ITEMS", "10000"))
CONDUCTOR_EXPERIMENT_MAX_TRIALS = int(os.environ.get("CONDUCTOR_EXPERIMENT_MAX_TRIALS", "20000"))
CONDUCTOR_EXPERIMENT_SLICES = int(os.environ.get("CONDUCTOR_EXPERIMENT_SLICES", "4"))
CONDUCTOR_EXPERIMENT_CONCURRENCY = int(os.environ.get("CONDUCTOR_EXPERIMENT_CONCURRENCY", "4"))
