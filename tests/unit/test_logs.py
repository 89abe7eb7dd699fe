"""One log format: Berth's records and every library's go through the same structlog pipeline
(JSON lines by default, console lines on request) with the service and bound ids on each."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from berth import logs
from berth.logs import LIBRARY_LOGGERS, configure_logging, get_logger, log_context

LIBRARIES = (
    "aiokafka",
    "faust",
    "mode",
    "sqlalchemy.engine",
    "alembic.runtime.migration",
    "kubernetes.client.rest",
    "urllib3.connectionpool",
    "asyncio",
)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, library_level in levels.items():
        logging.getLogger(name).setLevel(library_level)
    logging.captureWarnings(False)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    logs._service = None


def records(text: str) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(record, dict) for record in parsed)
    return parsed


def test_every_library_logs_json_with_the_service(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", service="decision")
    get_logger("berth.services.decision").info("cell taken over", cell=3)
    for name in LIBRARIES:
        logging.getLogger(name).warning("%s says %s", name, "hello")
    out = records(capsys.readouterr().err)
    assert out[0]["event"] == "cell taken over" and out[0]["cell"] == 3
    assert [record["logger"] for record in out[1:]] == list(LIBRARIES)
    for record in out:
        assert record["service"] == "decision" and record["level"] in ("info", "warning")
        assert record["timestamp"].endswith("Z")
    assert out[1]["event"] == "aiokafka says hello"


def test_bound_ids_reach_library_records_and_threads_keep_the_service(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", service="binder")
    with log_context(cell=2, trace_id="4bf92f3577b34da6a3ce929d0e0e4736"):
        logging.getLogger("aiokafka.consumer").error("fetch failed")
        get_logger(__name__).warning("retrying", attempt=1)
    logging.getLogger("aiokafka").error("outside")
    thread = threading.Thread(target=lambda: logging.getLogger("urllib3").warning("from a pool thread"))
    thread.start()
    thread.join()
    first, second, outside, threaded = records(capsys.readouterr().err)
    for record in (first, second):
        assert record["cell"] == 2 and record["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert "cell" not in outside and "trace_id" not in outside
    assert threaded["service"] == "binder" and threaded["logger"] == "urllib3"


def test_library_chatter_stays_out_unless_debugging(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    logging.getLogger("aiokafka").info("Updating subscribed topics")
    get_logger("berth.x").info("ours")
    assert [r["event"] for r in records(capsys.readouterr().err)] == ["ours"]
    configure_logging("debug", "json")
    logging.getLogger("aiokafka").debug("Sending request")
    assert [r["event"] for r in records(capsys.readouterr().err)] == ["Sending request"]


def test_configuring_again_replaces_the_handler_and_basic_config_ones(capsys: pytest.CaptureFixture[str]) -> None:
    logging.basicConfig(stream=sys.stderr, force=False)
    configure_logging("info", "json")
    configure_logging("info", "json", service="audit")
    ours = [h for h in logging.getLogger().handlers if isinstance(h, logs._BerthHandler)]
    assert len(ours) == 1
    assert not [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    logging.getLogger("sqlalchemy").warning("once")
    assert len(records(capsys.readouterr().err)) == 1


def test_secrets_in_library_messages_and_exceptions_are_masked_and_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json")
    logging.getLogger("sqlalchemy.pool").warning("connecting to postgresql+psycopg://berth:hunter2@db:5432/berth")
    try:
        raise ConnectionRefusedError("no broker")
    except ConnectionRefusedError:
        logging.getLogger("aiokafka").exception("Unable connect")
    get_logger("berth.x").info("login", password="hunter2")
    masked, failed, ours = records(capsys.readouterr().err)
    assert "hunter2" not in json.dumps([masked, ours]) and "berth:***@db" in masked["event"]
    assert ours["password"] == "***"
    assert "ConnectionRefusedError: no broker" in failed["exception"]


def test_warnings_are_records_too(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "json", service="inventory")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("Unclosed thing", ResourceWarning, stacklevel=1)
    (record,) = records(capsys.readouterr().err)
    assert record["logger"] == "py.warnings" and "Unclosed thing" in record["event"]


def test_console_format_is_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", "console", service="ingest")
    logging.getLogger("kubernetes").warning("watch expired")
    get_logger("berth.y").info("leading", term=2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert "watch expired" in lines[0] and "[kubernetes]" in lines[0] and "service=ingest" in lines[0]
    assert "leading" in lines[1] and "term=2" in lines[1]
    with pytest.raises(ValueError):
        json.loads(lines[0])


def test_the_cli_log_format_option_reaches_a_command(tmp_path) -> None:
    """`berth --log-format console` and BERTH_LOG_FORMAT: a command's records (here a warning a
    command logs while it fails) come out as the option says; the error line stays one line."""
    script = (
        "import logging, sys\n"
        "from berth.cli import app\n"
        "@app.command('log-and-fail', hidden=True)\n"
        "def log_and_fail():\n"
        "    from berth.logs import get_logger\n"
        "    get_logger('berth.t').warning('about to fail', step=1)\n"
        "    raise ConnectionRefusedError('nothing there')\n"
        "sys.argv[0] = 'berth'\n"
        "app()\n"
    )
    for argv, is_json in ((["log-and-fail"], True), (["--log-format", "console", "log-and-fail"], False)):
        done = subprocess.run(
            [sys.executable, "-c", script, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        warning, error = done.stderr.strip().splitlines()
        assert done.returncode == 69 and error.startswith("error: cannot connect: ConnectionRefusedError")
        if is_json:
            assert json.loads(warning)["event"] == "about to fail"
        else:
            assert "about to fail" in warning and "step=1" in warning


def test_a_logger_follows_each_new_set_up_and_is_built_once_per_set_up(capsys: pytest.CaptureFixture[str]) -> None:
    log = get_logger("berth.services.inventory")  # as modules do, before logging is set up
    configure_logging("info", "json", service="inventory")
    log.debug("pod routed", pod="ml/a")
    first = log._logger()
    assert log._logger() is first  # no new logger per line
    configure_logging("debug", "json", service="inventory")
    log.debug("pod routed", pod="ml/b")
    assert log._logger() is not first
    routed = [r for r in records(capsys.readouterr().err) if r["event"] == "pod routed"]
    assert [r["pod"] for r in routed] == ["ml/b"]
