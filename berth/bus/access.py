"""Why a secured Kafka refuses Berth, when aiokafka does not say.

aiokafka's clients log a failed TLS handshake or SASL authentication while bootstrapping and then
raise only ``KafkaConnectionError("Unable to bootstrap ...")``. :func:`kafka_access_error` opens
one connection per bootstrap server the way those clients do (same TLS context, same SASL
exchange) and returns the error itself, so a failure report can name the setting to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterator

from berth.settings import KafkaSettings

PROBE_TIMEOUT_S = 10.0


@contextlib.contextmanager
def _aiokafka_silenced() -> Iterator[None]:
    """aiokafka logs every failed connection at error level; the caller reports this one."""
    logger = logging.getLogger("aiokafka")
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


async def _connect(kafka: KafkaSettings, host: str, port: int, timeout_s: float) -> BaseException | None:
    from aiokafka.conn import create_conn

    options = kafka.client_options()
    del options["bootstrap_servers"]
    try:
        connection = await asyncio.wait_for(
            create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **options), timeout_s
        )
    except Exception as exc:  # refused, timed out, TLS or SASL: the caller sorts them
        return exc
    connection.close()
    return None


def _is_access_error(exc: BaseException) -> bool:
    """TLS and SASL refusals, as opposed to a broker that is not there."""
    from aiokafka import errors

    return isinstance(exc, (ssl.SSLError, errors.UnsupportedSaslMechanismError, errors.BrokerResponseError))


async def kafka_access_error(kafka: KafkaSettings, *, timeout_s: float = PROBE_TIMEOUT_S) -> BaseException | None:
    """The TLS or SASL error the first bootstrap server that answers raises to a client with
    ``kafka``'s settings; None when one of them accepts it or none answers at all (the broker is
    then unreachable, which the caller's own error already says)."""
    from aiokafka.conn import collect_hosts

    with _aiokafka_silenced():
        for host, port, _ in collect_hosts(kafka.bootstrap, randomize=False):
            error = await _connect(kafka, host, port, timeout_s)
            if error is None:
                return None
            if _is_access_error(error):
                return error
    return None
