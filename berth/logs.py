"""Structured logs (structlog): JSON lines for services, readable console output for people.

One pipeline for every record of the process: Berth's own (structlog) and every library's
(aiokafka, faust, mode, SQLAlchemy, Alembic, kubernetes, urllib3, asyncio, Python warnings) go
through the stdlib root logger to one handler whose :class:`structlog.stdlib.ProcessorFormatter`
renders them alike: ``timestamp``, ``level``, ``logger``, ``event``, the ``service`` and whatever
context is bound (``cell``, ``trace_id``: see :func:`log_context`), as one JSON object per line
(``BERTH_LOG_FORMAT=json``, the default) or as a console line (``console``, for people).

A redaction processor masks anything that looks like a secret before it is rendered, so a
password passed by mistake as a log field (or inside a URL in a library's message) never reaches
the output; and the passwords Berth hands to its clients (:func:`hide_secret`) are masked wherever
they appear, since a library may print them inside a request it logs at debug level (aiokafka
does, for SASL PLAIN).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

_SECRET_KEYS = re.compile(r"(password|secret|token|sasl_plain|credential)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")

LIBRARY_LOGGERS = (
    "aiokafka",
    "kafka",
    "faust",
    "mode",
    "sqlalchemy",
    "alembic",
    "kubernetes",
    "urllib3",
    "asyncio",
    "psycopg",
    "py.warnings",
    "rocksdict",
    "venusian",
    "croniter",
    "yarl",
    "aiohttp",
    "opentracing",
    "httpx",
    "httpcore",
)
"""Loggers of the libraries Berth runs on: they get ``library_level`` (see :func:`configure_logging`)."""

LEVELS = ("debug", "info", "warning", "error", "critical")

_service: str | None = None
_set_ups = 0
"""How many times logging was configured: a :class:`_Logger` built under an older set-up builds
its logger again."""
_hidden: set[str] = set()


def hide_secret(value: str | None) -> None:
    """Mask ``value`` (a password) wherever it appears in a log record from now on. Values
    shorter than eight characters are not masked: they would mask ordinary words (the dev
    stack's database password is ``berth``, the name in every topic)."""
    if value and len(value) >= 8:
        _hidden.add(value)


def _mask_hidden(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if _hidden:
        for key, value in event_dict.items():
            if isinstance(value, str) and any(secret in value for secret in _hidden):
                for secret in _hidden:
                    value = value.replace(secret, "***")
                event_dict[key] = value
    return event_dict


def _redact(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and key != "event":
            event_dict[key] = "***"
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = _URL_PASSWORD.sub(r"\1***@", value)
    return event_dict


def _add_service(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """The process's service on every record, threads' included (contextvars do not reach the
    threads of a library's pool)."""
    if _service is not None:
        event_dict.setdefault("service", _service)
    return event_dict


def _level_number(name: str) -> int:
    return logging.getLevelNamesMapping()[name.upper()]


class _BerthHandler(logging.StreamHandler):
    """The one handler of the root logger (replaced, never stacked, when logging is configured
    again). It writes to whatever ``sys.stderr`` is at the time of the record (a test's capture,
    a redirected stream), never to a stream that was closed since logging was configured."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure_logging(
    level: str = "info", fmt: str = "json", service: str | None = None, *, library_level: str | None = None
) -> None:
    """Route every record of the process through one structlog pipeline to stderr (stdout stays
    for results). Safe to call again: the second call replaces the first's handler.

    ``level`` filters Berth's own records; ``library_level`` the libraries' (default: ``warning``,
    or ``level`` when that is higher; everything with ``debug``), so that aiokafka's and faust's
    chatter stays out of a service's log unless asked for.
    """
    global _service, _set_ups
    _set_ups += 1
    if service is not None:
        _service = service
    if library_level is None:
        library_level = "debug" if level == "debug" else max(level, "warning", key=_level_number)
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _add_service,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.PositionalArgumentsFormatter(),
        _redact,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(_level_number(level)),
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Not cached here: the CLI configures logging, then the service again; _Logger caches
        # each module's logger per set-up, so one made before the last set-up follows it.
        cache_logger_on_first_use=False,
    )
    final: list[Any] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if fmt == "json":
        final.append(structlog.processors.format_exc_info)
    final += [_mask_hidden, renderer]
    handler = _BerthHandler()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=final))
    root = logging.getLogger()
    for existing in list(root.handlers):
        # Ours from an earlier call, and logging.basicConfig's (a library's or a tool's); test
        # runners' capturing handlers stay.
        if isinstance(existing, _BerthHandler) or type(existing) is logging.StreamHandler:
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(min(_level_number(level), _level_number(library_level)))
    for name in LIBRARY_LOGGERS:
        library = logging.getLogger(name)
        library.setLevel(_level_number(library_level))
        for existing in list(library.handlers):  # e.g. a library that set up its own StreamHandler
            if type(existing) is logging.StreamHandler:
                library.removeHandler(existing)
        library.propagate = True
    logging.captureWarnings(True)  # warnings.warn (ResourceWarning, deprecations) as records too


def get_logger(name: str | None = None) -> Any:
    """A structlog logger for module ``name`` that follows the newest :func:`configure_logging`."""
    return _Logger(name)


class _Logger:
    """structlog's logger for ``name``, built once per logging set-up.

    structlog's lazy proxy (``cache_logger_on_first_use=False``) builds a bound logger, and a
    stdlib logger under logging's lock, on every call, a debug line that is filtered out included:
    2 % of the inventory's time went to its per-pod debug line. This keeps the logger built under
    the current set-up and builds it again after the next :func:`configure_logging`."""

    __slots__ = ("_bound", "_built_under", "_name")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._bound: Any = None
        self._built_under = -1

    def _logger(self) -> Any:
        if self._built_under != _set_ups:
            self._bound = structlog.get_logger(self._name).bind()
            self._built_under = _set_ups
        return self._bound

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._logger(), attribute)


@contextmanager
def log_context(**ids: Any) -> Iterator[None]:
    """Bind ``cell=``, ``trace_id=`` (any ids) to every record logged inside, libraries' included,
    in this task and the tasks it starts: ``with log_context(cell=3): ...``."""
    with structlog.contextvars.bound_contextvars(**{k: v for k, v in ids.items() if v is not None}):
        yield
