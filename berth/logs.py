"""Structured logs (structlog): JSON lines for services, readable console output for people.

A redaction processor masks anything that looks like a secret before it is rendered, so a
password passed by mistake as a log field never reaches the output.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

_SECRET_KEYS = re.compile(r"(password|secret|token|sasl_plain|credential)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


def _redact(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key):
            event_dict[key] = "***"
        elif isinstance(value, str) and "://" in value:
            event_dict[key] = _URL_PASSWORD.sub(r"\1***@", value)
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json", service: str | None = None) -> None:
    """Configure structlog once per process. Logs go to stderr; stdout stays for results."""
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=True)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    if service:
        structlog.contextvars.bind_contextvars(service=service)
    # aiokafka and faust log through stdlib logging; keep them quiet unless debugging.
    logging.basicConfig(level=logging.WARNING if level != "debug" else logging.DEBUG, stream=sys.stderr)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
