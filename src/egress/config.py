"""Settings: one home directory holds the embedded state and ``egress.toml``.

Built once at the edge (CLI, app factory) and passed down; nothing reads the
environment at import time. Precedence: defaults < ``HOME/egress.toml`` < ``EGRESS_*``
environment variables < explicit arguments.

``egress.toml``::

    [store]
    url = "postgresql://egress@db/egress"      # default: sqlite:///HOME/egress.db

    [sources.main]
    url = "postgresql://reader:secret@db/app"

    [destinations.local]                       # the default destination
    type = "local"
    path = "/var/lib/egress/exports"           # default: HOME/exports

    [destinations.lake]
    type = "s3"
    bucket = "exports"
    prefix = "egress"
    endpoint_url = "http://127.0.0.1:9000"

    [worker]
    concurrency = 2
    lease_seconds = 30

    [webhooks]
    allow_http = false                         # https callbacks only (the default)

Environment: ``EGRESS_HOME``, ``EGRESS_STORE_URL``, ``EGRESS_SOURCE_<NAME>_URL`` (and
``_PASSWORD``, ``_MAX_TASKS`` … see SourceLimits),
``EGRESS_WORKER_<SETTING>`` (e.g. ``EGRESS_WORKER_LEASE_SECONDS=20``),
``EGRESS_EXPORT_<SETTING>``, ``EGRESS_API_<SETTING>`` (see ApiSettings),
``EGRESS_WEBHOOKS_<SETTING>`` (see WebhookSettings).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from egress.domain.limits import SourceLimits
from egress.exceptions import ConfigError

CONFIG_FILE = "egress.toml"
#: Most threads ``api.threads`` may ask for (each may hold a store connection).
API_THREADS_MAX = 64


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("EGRESS_HOME"):
        return Path(env["EGRESS_HOME"])
    data = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "egress"


@dataclass(frozen=True)
class WorkerSettings:
    #: Tasks run at once by one worker process.
    concurrency: int = 2
    #: A lease lasts this long unless renewed; a dead worker's task is taken over after it.
    lease_seconds: float = 30.0
    #: The lease is renewed this often while a slice runs.
    heartbeat_seconds: float = 5.0
    #: A slice ends after about this long; the task goes back in the queue.
    slice_seconds: float = 20.0
    #: Tasks a project may have running at once (fairness between tenants).
    project_cap: int = 4
    #: Transient failures in a row without progress before a task fails for good: a
    #: committed part starts the count over, so a source that restarts now and then never
    #: fails an export that keeps moving. With the backoff (2, 4, 8 … s, at most
    #: backoff_max_seconds) ten failures wait out about 13 minutes of a source being down.
    max_attempts: int = 10
    #: First retry delay; doubles each attempt (with jitter), capped at backoff_max_seconds.
    backoff_seconds: float = 2.0
    #: Longest retry delay (seconds).
    backoff_max_seconds: float = 300.0
    #: How often the reconciler runs inside each worker.
    reconcile_seconds: float = 2.0
    #: Idle wait between claims when there is nothing to do.
    poll_seconds: float = 0.5
    #: On SIGTERM: time to commit the part in hand and release leases before exiting.
    grace_seconds: float = 30.0
    #: CPU priority of the worker's threads (Unix nice, 0–19; only ever raised): beside
    #: ``egress serve`` on the same machine the API then gets the CPU first, and the
    #: workers take what it leaves. 0 keeps the priority the process started with.
    nice: int = 10
    #: Reach the job store through the API at this URL (``egress worker --api``) instead
    #: of directly: the worker then holds no database credentials, only ``api_token``.
    api_url: str = ""
    #: A token of scope ``worker`` for ``api_url`` (``EGRESS_WORKER_API_TOKEN``). Never logged.
    api_token: str = field(default="", repr=False)
    #: ``egress worker`` serves /metrics, /healthz and /readyz on this port
    #: (``EGRESS_WORKER_METRICS_PORT``, ``--metrics-port``; docs/metrics.md). 0: none.
    #: Several workers on one machine need a port each.
    metrics_port: int = 9464
    #: Address of that server: loopback by default; a container sets 0.0.0.0 so that
    #: Prometheus and the kubelet can reach it (``--metrics-host``).
    metrics_host: str = "127.0.0.1"
    #: /healthz answers 503 when a loop of the worker (main loop, a slot, the reconciler,
    #: the remote poller, the webhook dispatcher) has not completed an iteration for this
    #: long; a slot running a slice gets ``slice_seconds`` more. Far above any healthy
    #: iteration (a claim, a reconcile pass, a webhook round of ``webhooks.timeout``, a
    #: store's transaction retries), and above a database failover, so a slow store does
    #: not get healthy workers restarted; short enough that a stuck worker is restarted
    #: within minutes (its tasks are taken over once their leases end, ``lease_seconds``).
    health_stale_seconds: float = 120.0


@dataclass(frozen=True)
class ExportDefaults:
    #: An export still unfinished this long after creation fails (seconds).
    max_duration: float = 3600.0
    #: Bytes of encoded output per part: a checkpoint is committed after each (``--part-size``).
    part_size: int = 8 * 1024 * 1024
    #: Bytes after which an output file is closed and the next one begun; unset: one file
    #: per table (Parquet: 512 MiB by default, docs/formats.md).
    max_file_size: int | None = None
    #: Partial outputs of a failed export are kept this long (seconds) so that a retry
    #: continues from its checkpoints; then the reconciler removes them.
    failed_retention_seconds: float = 86400.0
    #: Files of a completed export are removed this many days after it finished and the
    #: export shows ``expired``; unset (the default) keeps them until deleted.
    retention_days: float | None = None
    #: Multipart uploads under an S3 destination older than this (and than max_duration)
    #: that no export finished are aborted by the reconciler.
    orphan_upload_seconds: float = 86400.0
    #: How often the reconciler looks for such uploads.
    orphan_sweep_seconds: float = 600.0
    #: A free-form query export's statement (each page of it) is cancelled after this
    #: many seconds (PostgreSQL statement_timeout; SQLite a progress handler).
    query_timeout_seconds: float = 300.0
    #: Largest text or binary value one row may hold, and most bytes the rows of one part
    #: may hold as read: above them a task fails naming the row (engine/sizes.py).
    max_value_bytes: int = 64 * 1024 * 1024
    #: Most bytes the rows of one part may hold as read (see max_value_bytes).
    max_page_bytes: int = 1024 * 1024 * 1024
    #: ``split: auto`` plans a table with more estimated rows than this as several tasks
    #: over key ranges, one per this many rows (at most 64; docs/jobs.md, "Splitting a
    #: big table"). Without ``split``, see ``auto_split``.
    split_rows: int = 10_000_000
    #: Split tables above ``split_rows`` even when an export does not ask, where the
    #: split is stitched (tables with a one-column key, no filters, written as one
    #: file): the output is the bytes one task writes, only sooner with idle workers.
    auto_split: bool = True


@dataclass(frozen=True)
class RemoteSettings:
    """Remote engines (Trino): submitted once, polled from the job store (docs/trino.md)."""

    #: Delays between polls of a submitted query, in order; the last repeats. Seconds.
    poll_delays: tuple[float, ...] = (2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0, 89.0, 90.0)
    #: Most due tasks one poll pass takes, and the threads it polls them with.
    poll_batch: int = 100
    #: Threads one poll pass polls its tasks with.
    poll_threads: int = 8
    #: How often a worker looks for due polls (seconds).
    poll_pass_seconds: float = 0.5
    #: A taken task is not due for anyone else for this long (a poller that died).
    poll_hold_seconds: float = 60.0
    #: A claimed remote task that was never submitted is put back after this long.
    claimed_reset_seconds: float = 600.0
    #: A submitted task not polled for this long is looked up by its query id.
    unpolled_lookup_seconds: float = 1800.0
    #: The first call of a task (a cold resource group may not answer): its timeout,
    #: the retries after a timeout, and the wait between them.
    first_call_timeout: float = 30.0
    #: Retries of a first call that timed out.
    first_call_retries: int = 2
    #: Seconds between those retries.
    first_call_wait: float = 5.0


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API (``egress serve``); ``[api]`` in egress.toml, ``EGRESS_API_<SETTING>``."""

    #: Largest request body accepted (bytes); larger ones get 413.
    max_body_bytes: int = 256 * 1024
    #: Requests per second each token may make on average (token bucket), and the burst
    #: it may make at once; above it: 429 with Retry-After.
    rate_limit_per_second: float = 20.0
    #: Requests a token may make at once above that average.
    rate_limit_burst: int = 100
    #: Exports a project may have queued or running at once; more: 429 with Retry-After.
    max_active_exports: int = 20
    #: A create checks its tables against the source's catalog as read at most this many
    #: seconds ago (a table it does not know is looked up at once). 0: read it every time.
    catalog_cache_seconds: float = 10.0
    #: ``GET …/rows`` streams a table only up to this many estimated rows; above, it
    #: answers 422 and points to ``POST /v1/exports``.
    sync_max_rows: int = 100_000
    #: Lifetime of the presigned S3 URL a download redirects to (seconds).
    presign_seconds: int = 300
    #: Signed download links: default and longest lifetime (seconds).
    link_default_seconds: int = 3600
    #: Longest lifetime a signed download link may be given (seconds).
    link_max_seconds: int = 7 * 24 * 3600
    #: Key that signs download links (any long random string). Empty: a key is generated
    #: once into ``HOME/api-link-key`` (mode 0600). API nodes that share links need the
    #: same key. Never logged.
    link_signing_key: str = field(default="", repr=False)
    #: Base URL that signed download links start with (``https://exports.example.com``,
    #: a path prefix allowed). Empty: taken from each request (its Host header).
    public_url: str = ""
    #: Throughput assumed by ``POST /v1/exports:estimate`` for its time estimate.
    estimate_rows_per_second: float = 200_000.0
    #: ``last_used_at`` of a token is written at most this often (seconds).
    token_touch_seconds: float = 60.0
    #: Threads that run the API's blocking work (store calls, catalog checks) at once;
    #: more requests wait their turn in the event loop. The store keeps as many pooled
    #: connections, so a burst never opens and closes connections, and opens up to 8 of
    #: them when the API process starts (see docs/benchmarks.md).
    threads: int = 16
    #: An idle keep-alive connection is closed after this many seconds. Keep it longer
    #: than the idle timeout of the load balancer or proxy in front (AWS ALB and nginx: 60
    #: s; Google Cloud's: 600 s): when the server closes a connection first, a request the
    #: proxy sends on it at that moment fails (a 502). uvicorn's own default is 5 s.
    keep_alive_seconds: int = 75


@dataclass(frozen=True)
class WebhookSettings:
    """Webhook deliveries (docs/webhooks.md); ``[webhooks]`` in egress.toml,
    ``EGRESS_WEBHOOKS_<SETTING>`` (``schedule`` as comma-separated seconds)."""

    #: Accept ``http://`` callback URLs. Development and tests only: https otherwise.
    allow_http: bool = False
    #: Deliver to loopback addresses (127.0.0.0/8, ::1, localhost). Tests and local
    #: development only; every other private/internal address is refused regardless.
    allow_loopback: bool = False
    #: Seconds one attempt may take in all (connect, TLS, send, response headers).
    timeout: float = 15.0
    #: Seconds to wait after the 1st, 2nd, … failed attempt; the last delay repeats.
    schedule: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0)
    #: Give up when the next attempt would begin later than this after the event (3 days).
    give_up_after: float = 3 * 86400.0
    #: How often each worker looks for due deliveries.
    poll_seconds: float = 1.0
    #: Deliveries one worker sends at once.
    concurrency: int = 4
    #: A delivery claimed by a worker that died is sent again after this long; must be
    #: longer than ``timeout``.
    lease_seconds: float = 60.0
    #: After a rotation, the previous secrets keep signing (beside the new one) this long.
    rotation_grace_seconds: float = 86400.0
    #: Deliveries one worker sends to one receiving host per second, on average (bursts of
    #: ``per_host_burst``); the rest wait their turn in the outbox. 0: no limit.
    per_host_rate: float = 5.0
    #: Deliveries to one host that may go at once above that average.
    per_host_burst: int = 10


#: ``[sources.NAME]`` keys that are not limits.
SOURCE_KEYS = ("url", "password")
#: Source kinds (URL schemes) whose reads can be given a statement timeout.
STATEMENT_TIMEOUT_SCHEMES = ("postgresql", "postgres")


def _source_limits(name: str, url: str, values: Mapping[str, Any]) -> SourceLimits:
    limits = {k: v for k, v in values.items() if k not in SOURCE_KEYS}
    checked: SourceLimits = _coerce(SourceLimits, limits, f"sources.{name}")
    for key in ("max_tasks", "statement_timeout_seconds", "page_pause_seconds",
                "max_rows_per_second"):
        if getattr(checked, key) < 0:
            raise ConfigError(f"bad value for sources.{name}.{key}: {getattr(checked, key)}; "
                              "it must be >= 0 (0: no limit)")
    if checked.page_pause_seconds > 60:
        raise ConfigError(f"bad value for sources.{name}.page_pause_seconds: "
                          f"{checked.page_pause_seconds:g}; allowed: 0 to 60")
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    if checked.statement_timeout_seconds and scheme not in STATEMENT_TIMEOUT_SCHEMES:
        raise ConfigError(f"sources.{name}.statement_timeout_seconds is not supported for "
                          f"{scheme} sources; supported: PostgreSQL")
    return checked


@dataclass(frozen=True)
class Settings:
    home: Path
    store_url: str = field(repr=False)  # may hold a password
    #: name → URL; URLs may hold passwords, so they stay out of repr() and logs
    sources: dict[str, str] = field(default_factory=dict, repr=False)
    destinations: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    export: ExportDefaults = field(default_factory=ExportDefaults)
    api: ApiSettings = field(default_factory=ApiSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    remote: RemoteSettings = field(default_factory=RemoteSettings)
    #: Whether API callers / `jobs create` may name a source by URL instead of by name.
    allow_source_urls: bool = True
    #: name → how hard the workers may read it (sources without limits are absent)
    source_limits: dict[str, SourceLimits] = field(default_factory=dict)

    def limits_of(self, source: str) -> SourceLimits:
        """The limits of a source as an export names it (none for a URL given directly)."""
        return self.source_limits.get(source) or SourceLimits()

    def source_task_limits(self) -> dict[str, int]:
        """name → most tasks running at once, for the sources that have such a limit."""
        return {name: lim.max_tasks for name, lim in sorted(self.source_limits.items())
                if lim.max_tasks > 0}

    @property
    def default_destination(self) -> str:
        return "local"

    def source_url(self, name_or_url: str) -> str:
        if name_or_url in self.sources:
            return self.sources[name_or_url]
        if "://" in name_or_url and self.allow_source_urls:
            return name_or_url
        known = ", ".join(sorted(self.sources)) or "none configured"
        raise ConfigError(f"unknown source {name_or_url!r}; configured sources: {known}")

    def destination(self, name: str) -> dict[str, Any]:
        try:
            return self.destinations[name]
        except KeyError:
            known = ", ".join(sorted(self.destinations))
            raise ConfigError(f"unknown destination {name!r}; known: {known}") from None


def _coerce(cls: type, values: Mapping[str, Any], where: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            allowed = ", ".join(sorted(fields))
            raise ConfigError(f"unknown setting {where}.{key}; allowed: {allowed}")
        default = getattr(cls(), key)
        try:
            kwargs[key] = _convert(default, value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad value for {where}.{key}: {value!r}") from exc
    return cls(**kwargs)


_BOOL_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _convert(default: Any, value: Any) -> Any:
    if default is None:  # optional numbers: a whole number stays an int
        number = float(value)
        return int(number) if number.is_integer() else number
    if isinstance(default, bool) and isinstance(value, str):
        # bool("false") is True: environment variables need spelling out.
        word = value.strip().lower()
        if word not in _BOOL_WORDS:
            raise ValueError(f"not a boolean; use one of {', '.join(_BOOL_WORDS)}")
        return _BOOL_WORDS[word]
    if isinstance(default, tuple):
        items = value.split(",") if isinstance(value, str) else value
        return tuple(type(default[0])(v) for v in items) if default else tuple(items)
    return type(default)(value)


def _check_worker(worker: WorkerSettings) -> WorkerSettings:
    if not 0 <= worker.nice <= 19:
        raise ConfigError(f"bad value for worker.nice: {worker.nice}; allowed: 0 (keep the "
                          "priority) to 19 (lowest)")
    if not 0 <= worker.metrics_port <= 65535:
        raise ConfigError(f"bad value for worker.metrics_port: {worker.metrics_port}; "
                          "allowed: 1 to 65535, or 0 for no metrics and probes server")
    if worker.health_stale_seconds <= 0:
        raise ConfigError("bad value for worker.health_stale_seconds: "
                          f"{worker.health_stale_seconds:g}; it must be > 0")
    return worker


def _check_api(api: ApiSettings) -> ApiSettings:
    if not 1 <= api.threads <= API_THREADS_MAX:
        raise ConfigError(f"bad value for api.threads: {api.threads}; allowed: 1 to "
                          f"{API_THREADS_MAX} (the store keeps a connection per thread)")
    if api.keep_alive_seconds < 1:
        raise ConfigError(f"bad value for api.keep_alive_seconds: {api.keep_alive_seconds}; "
                          "it must be at least 1 (seconds)")
    return api


def _check_webhooks(ws: WebhookSettings) -> WebhookSettings:
    if not ws.schedule or any(d <= 0 for d in ws.schedule):
        raise ConfigError("webhooks.schedule must list one or more delays in seconds, each > 0")
    if ws.timeout <= 0 or ws.lease_seconds <= ws.timeout:
        raise ConfigError("webhooks.lease_seconds must be longer than webhooks.timeout (> 0)")
    if ws.concurrency < 1 or ws.poll_seconds <= 0:
        raise ConfigError("webhooks.concurrency must be >= 1 and webhooks.poll_seconds > 0")
    if ws.per_host_rate < 0 or ws.per_host_burst < 1:
        raise ConfigError("webhooks.per_host_rate must be >= 0 (0: no limit) and "
                          "webhooks.per_host_burst >= 1")
    return ws


def _with_password(url: str, password: str | None) -> str:
    """A source's ``password`` setting (kept apart from its URL in egress.toml) put into
    the URL, where the source reads it and every display masks it."""
    if not password or "://" not in url:
        return url
    from urllib.parse import quote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password or not parts.username:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = f"{parts.username}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


#: Top-level keys of egress.toml (anything else is a typo, refused by name).
TOP_LEVEL_KEYS = ("store", "sources", "destinations", "worker", "export", "api", "webhooks",
                  "remote", "allow_source_urls")
#: Settings of a destination that ``EGRESS_DESTINATION_<NAME>_<SETTING>`` may set (the
#: longest match wins, so names may hold underscores): ``type``, a local ``path``, and
#: the S3 sink's (sinks/s3.py: ``S3Sink``) keyword arguments.
DESTINATION_KEYS = (
    "type", "path", "bucket", "prefix", "endpoint_url", "region", "profile",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "min_part_bytes",
    "checksum", "max_attempts", "backoff", "max_backoff", "retry_seconds", "connect_timeout",
    "read_timeout", "addressing_style", "check_parts",
)
#: Environment variables read outside the settings (by the store's lock, the logger, the
#: loader itself): known, so that ``egress config check`` can point at typos.
OTHER_VARIABLES = ("EGRESS_HOME", "EGRESS_CONFIG", "EGRESS_STORE_URL", "EGRESS_LOG_FORMAT",
                   "EGRESS_STORE_LOCK_SECONDS", "EGRESS_STORE_STOPPED_WRITER",
                   "EGRESS_ALLOW_SOURCE_URLS")
#: Prefixes of the sections' variables: ``EGRESS_WORKER_LEASE_SECONDS`` is worker.lease_seconds.
SECTION_PREFIXES = {"EGRESS_WORKER_": "worker", "EGRESS_EXPORT_": "export",
                    "EGRESS_API_": "api", "EGRESS_WEBHOOKS_": "webhooks",
                    "EGRESS_REMOTE_": "remote"}


def config_path(home: Path, env: Mapping[str, str]) -> Path:
    """The configuration file: ``EGRESS_CONFIG`` if set (a ConfigMap mounted read-only,
    say), else ``HOME/egress.toml``."""
    return Path(env["EGRESS_CONFIG"]) if env.get("EGRESS_CONFIG") else home / CONFIG_FILE


def read_config_file(path: Path, *, required: bool = False) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise ConfigError(f"no configuration file at {path}")
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)} in {path}; allowed at the "
                          f"top level: {', '.join(TOP_LEVEL_KEYS)}")
    for section in ("store", "sources", "destinations", *SECTION_PREFIXES.values()):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"[{section}] in {path} must be a table")
    return data


def _destination_variable(rest: str) -> tuple[str, str] | None:
    """``LAKE_ENDPOINT_URL`` → ("lake", "endpoint_url"): the longest known setting."""
    lowered = rest.lower()
    for key in sorted(DESTINATION_KEYS, key=len, reverse=True):
        if lowered.endswith("_" + key) and len(lowered) > len(key) + 1:
            return lowered[: -len(key) - 1], key
    return None


def _source_variable(key: str) -> tuple[str, str] | None:
    """``EGRESS_SOURCE_MAIN_MAX_TASKS`` → ("main", "max_tasks"): the longest known setting
    (names may hold underscores)."""
    if not key.startswith("EGRESS_SOURCE_"):
        return None
    rest = key[len("EGRESS_SOURCE_"):].lower()
    settings = (*SOURCE_KEYS, *(f.name for f in dataclasses.fields(SourceLimits)))
    for setting in sorted(settings, key=len, reverse=True):
        if rest.endswith("_" + setting) and len(rest) > len(setting) + 1:
            return rest[: -len(setting) - 1], setting
    return None


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """``EGRESS_*`` variables that no setting reads (typos): for ``egress config check``."""
    unknown = []
    for key in env:
        if not key.startswith("EGRESS_") or key in OTHER_VARIABLES:
            continue
        if _source_variable(key) is not None:
            continue
        if key.startswith("EGRESS_DESTINATION_") and _destination_variable(
                key[len("EGRESS_DESTINATION_"):]):
            continue
        if any(key.startswith(prefix) for prefix in SECTION_PREFIXES):
            continue  # an unknown setting of a section is refused by the loader itself
        unknown.append(key)
    return sorted(unknown)


def load_settings(
    home: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
    *, config_file: str | os.PathLike[str] | None = None,
) -> Settings:
    """Defaults < the configuration file (``config_file``, else ``EGRESS_CONFIG``, else
    ``HOME/egress.toml``) < ``EGRESS_*`` variables."""
    env = os.environ if env is None else env
    home_path = Path(home) if home is not None else default_home(env)
    if config_file is not None:
        data = read_config_file(Path(config_file), required=True)
    else:
        data = read_config_file(config_path(home_path, env), required=bool(
            env.get("EGRESS_CONFIG")))

    store_url = env.get("EGRESS_STORE_URL") or data.get("store", {}).get("url")
    store_url = store_url or f"sqlite:///{home_path / 'egress.db'}"

    source_values = {name: dict(cfg) for name, cfg in data.get("sources", {}).items()}
    for key, value in env.items():
        found = _source_variable(key)
        if found is not None:
            name, setting = found
            source_values.setdefault(name, {})[setting] = value
    sources = {name: _with_password(cfg["url"], cfg.get("password"))
               for name, cfg in source_values.items() if "url" in cfg}
    orphans = sorted(name for name, cfg in source_values.items()
                     if name not in sources and set(cfg) - set(SOURCE_KEYS))
    if orphans:
        raise ConfigError(f"source(s) {', '.join(orphans)} have settings but no url")
    source_limits = {name: _source_limits(name, sources[name], cfg)
                     for name, cfg in source_values.items() if name in sources}
    source_limits = {name: lim for name, lim in source_limits.items()
                     if lim != SourceLimits()}

    destinations: dict[str, dict[str, Any]] = {
        "local": {"type": "local", "path": str(home_path / "exports")}}
    for name, cfg in data.get("destinations", {}).items():
        destinations[name] = dict(cfg)
    for key, value in env.items():
        if key.startswith("EGRESS_DESTINATION_"):
            found = _destination_variable(key[len("EGRESS_DESTINATION_") :])
            if found is None:
                raise ConfigError(f"unknown destination setting in {key}; allowed: "
                                  f"EGRESS_DESTINATION_<NAME>_<SETTING> with a setting of "
                                  f"{', '.join(DESTINATION_KEYS)}")
            name, setting = found
            destinations.setdefault(name, {})[setting] = value

    values: dict[str, dict[str, Any]] = {
        section: dict(data.get(section, {})) for section in SECTION_PREFIXES.values()}
    for key, value in env.items():
        for prefix, section in SECTION_PREFIXES.items():
            if key.startswith(prefix):
                values[section][key[len(prefix) :].lower()] = value

    allow_source_urls: Any = env.get("EGRESS_ALLOW_SOURCE_URLS",
                                     data.get("allow_source_urls", True))
    try:
        allow = _convert(True, allow_source_urls)
    except ValueError as exc:
        raise ConfigError(f"bad value for allow_source_urls: {allow_source_urls!r}") from exc

    return Settings(
        home=home_path,
        store_url=store_url,
        sources=sources,
        destinations=destinations,
        worker=_check_worker(_coerce(WorkerSettings, values["worker"], "worker")),
        export=_coerce(ExportDefaults, values["export"], "export"),
        api=_check_api(_coerce(ApiSettings, values["api"], "api")),
        webhooks=_check_webhooks(_coerce(WebhookSettings, values["webhooks"], "webhooks")),
        remote=_coerce(RemoteSettings, values["remote"], "remote"),
        allow_source_urls=allow,
        source_limits=source_limits,
    )
