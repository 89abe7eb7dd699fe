"""Every `berth` command fails well with nothing running: one line on stderr saying what failed and
what to do, an exit status of the documented set (`berth --help`'s epilog), never a traceback.

The commands are enumerated from the typer app, so a new command is covered (or this test says
which arguments it needs). Kafka, Postgres and the Kubernetes API server are pointed at a closed
local port; every command runs as `berth` does, in a subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import typer

from berth.cli import EXIT_CODES, EXIT_NOT_FOUND, EXIT_SETTINGS, EXIT_UNAVAILABLE, EXIT_USAGE, app

_SCRIPT = Path(sys.executable).with_name("berth")
BERTH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "berth.cli"]
"""The installed `berth` entry point, as users run it."""

ARGUMENTS: dict[str, list[str]] = {
    # What a command needs on its command line to get as far as the services it uses.
    "tail": ["berth.inference.queue.v1", "--timeout", "1"],
    "publish queue-lag": ["--pool", "llama", "--tokens", "10", "--rate", "5"],
    "publish spot-notice": ["--node", "gpu-1", "--in", "30s"],
    "publish gpu-telemetry": ["--node", "gpu-1", "--device", "0:50:1024"],
    "db downgrade": ["base"],
    "audit explain": ["ml/train-0"],
    "audit what-if": ["--config", "{scheduler_config}"],
    "binder run": ["--backend", "kube", "--kubeconfig", "{kubeconfig}"],
    "cluster-sim run": ["--generate", "demo", "--port", "0", "--timeout", "5", "--no-progress"],
    "cluster-sim generate": ["demo", "--out", "{tmp}/workload.yaml"],
    "schemas export": ["--check"],  # without it, it would rewrite the committed schemas
    "dev nodes": ["2"],
}

OFFLINE = {"version", "simulate", "topics list", "schemas export", "config show", "cluster-sim generate", "dev status"}
"""Commands that need no service: they may succeed (or report their own result) with nothing running."""

NOT_RUN = {
    "dev up": "starts Kafka and Postgres (the test stack's own)",
    "dev down": "stops the dev stack other tests may be using",
    "demo": "starts the whole stack and runs for minutes",
}

KNOWN_UNCLOSED: dict[str, str] = {}


def leaf_commands() -> list[tuple[str, bool]]:
    """Every command of the app as "group sub-command", with whether it is hidden."""
    found: list[tuple[str, bool]] = []

    def walk(command: object, path: list[str]) -> None:
        children = getattr(command, "commands", None)
        if children:
            for name, child in children.items():
                walk(child, [*path, name])
        else:
            found.append((" ".join(path), bool(getattr(command, "hidden", False))))

    walk(typer.main.get_command(app), [])
    return found


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once it is closed


@pytest.fixture(scope="module")
def nothing_running(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("nothing-running")
    port = closed_port()
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    (tmp / "scheduler.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BERTH_", "KUBECONFIG"))}
    env.update(
        {
            "BERTH_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}",
            "BERTH_DATABASE_URL": f"postgresql+psycopg://berth:s3cret@127.0.0.1:{port}/berth?connect_timeout=2",
            "BERTH_KUBECONFIG": str(kubeconfig),
            "KUBECONFIG": str(kubeconfig),
            "XDG_STATE_HOME": str(tmp / "state"),
            "COLUMNS": "120",
            "TMP_DIR": str(tmp),
        }
    )
    return env


def run(argv: list[str], env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BERTH, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=env.get("TMP_DIR"),
    )


def is_log_record(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and {"event", "level", "timestamp"} <= set(record)


def check_fails_well(name: str, done: subprocess.CompletedProcess[str]) -> list[str]:
    """What is wrong with how ``name`` ended (nothing: an empty list)."""
    problems = []
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode not in EXIT_CODES:
        problems.append(f"exit status {done.returncode} is not documented")
    if "Traceback" in done.stderr:
        problems.append("a traceback on stderr")
    if "Unclosed" in done.stderr and name not in KNOWN_UNCLOSED:
        problems.append("an unclosed Kafka client")
    if done.returncode == EXIT_USAGE:
        if not 1 <= len(lines) <= 15:
            problems.append(f"{len(lines)} lines of usage error")
    elif done.returncode not in (0, 1):
        # One line for the operator, last; a service's JSON log records may come before it.
        human = [line for line in lines if not is_log_record(line)]
        if len(human) != 1 or not human[0].startswith("error: "):
            problems.append(f"not one error line: {human}")
    return problems


def test_every_command_fails_well_with_nothing_running(nothing_running: dict[str, str]) -> None:
    commands = leaf_commands()
    names = [name for name, _ in commands]
    assert {"tail", "topics create", "db current", "audit replay", "decision run", "config show"} <= set(names)
    assert set(NOT_RUN) <= set(names), "a command NOT_RUN names is gone: update the list"
    assert all(name in names for name in [*ARGUMENTS, *OFFLINE]), "an entry names a command that is gone"
    tmp = nothing_running["TMP_DIR"]
    argvs = {
        name: [
            arg.format(tmp=tmp, kubeconfig=nothing_running["KUBECONFIG"], scheduler_config=f"{tmp}/scheduler.yaml")
            for arg in ARGUMENTS.get(name, [])
        ]
        for name, _ in commands
        if name not in NOT_RUN
    }

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = dict(
            zip(argvs, pool.map(lambda name: run([*name.split(), *argvs[name]], nothing_running), argvs), strict=True)
        )

    report = {}
    for name, done in results.items():
        problems = check_fails_well(name, done)
        if name not in OFFLINE and done.returncode == 0:
            problems.append("succeeded with nothing running")
        if name in KNOWN_UNCLOSED and "Unclosed" not in done.stderr:
            problems.append("no longer leaves a client unclosed: remove it from KNOWN_UNCLOSED")
        if problems:
            report[name] = (problems, done.returncode, done.stderr[-1500:])
    assert not report, json.dumps(report, indent=1)
    # The ones that reach a service say which, and exit 69.
    for name in (
        "tail",
        "topics create",
        "db current",
        "db upgrade",
        "audit replay",
        "audit explain",
        "publish queue-lag",
        "decision run",
        "inventory run",
        "token-lag run",
        "binder run",
        "ingest run",
        "audit run",
        "dev nodes",
    ):
        assert results[name].returncode == EXIT_UNAVAILABLE, (name, results[name].stderr)
    assert "cannot reach Kafka at 127.0.0.1:" in results["topics create"].stderr
    assert "BERTH_KAFKA_BOOTSTRAP" in results["topics create"].stderr
    assert "cannot reach the audit database" in results["db current"].stderr
    assert "s3cret" not in results["db current"].stderr and "berth:***@" in results["db current"].stderr
    assert "cannot reach the Kubernetes API server" in results["dev nodes"].stderr
    assert results["simulate"].returncode == EXIT_NOT_FOUND


@pytest.mark.parametrize(
    ("argv", "env", "code", "says"),
    [
        (
            ["topics", "create"],
            {"BERTH_CONFIG": "/no/such/berth.yaml"},
            EXIT_SETTINGS,
            "BERTH_CONFIG=/no/such/berth.yaml",
        ),
        (["db", "current"], {"BERTH_LOG_LEVEL": "loud"}, EXIT_SETTINGS, "BERTH_LOG_LEVEL='loud'"),
        (["decision", "run"], {"BERTH_KAFKA__SECURITY_PROTOCOL": "SASL_SSL"}, EXIT_SETTINGS, "SASL_USERNAME"),
        (
            ["config", "show"],
            {"BERTH_KAFKA__REPLICATION_FACTOR": "0"},
            EXIT_SETTINGS,
            "BERTH_KAFKA__REPLICATION_FACTOR='0'",
        ),
        (["decision", "run", "--pools", "{tmp}/bad.yaml"], {}, EXIT_USAGE, "not valid YAML"),
        (["simulate", "{tmp}/bad.yaml"], {}, EXIT_USAGE, "bad.yaml"),
        (["audit", "what-if", "--config", "{tmp}/missing.yaml"], {}, EXIT_USAGE, "missing.yaml"),
        (["tail", "no.such.topic"], {}, EXIT_USAGE, "no.such.topic"),
        (["no-such-command"], {}, EXIT_USAGE, "No such command"),
    ],
)
def test_bad_settings_and_bad_files(
    nothing_running: dict[str, str], argv: list[str], env: dict[str, str], code: int, says: str
) -> None:
    tmp = Path(nothing_running["TMP_DIR"])
    (tmp / "bad.yaml").write_text("pools: {a: [1, 2\n")
    done = run([arg.format(tmp=tmp) for arg in argv], {**nothing_running, **env})
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert not check_fails_well(" ".join(argv[:2]), done), done.stderr


def test_debug_shows_the_traceback(nothing_running: dict[str, str]) -> None:
    done = run(["--debug", "topics", "create"], nothing_running)
    assert done.returncode == EXIT_UNAVAILABLE
    assert "Traceback" in done.stderr and "KafkaConnectionError" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("error: cannot reach Kafka")


def test_version_completion_and_config_show(nothing_running: dict[str, str]) -> None:
    from importlib.metadata import version

    done = run(["--version"], nothing_running)
    assert done.returncode == 0 and done.stdout.strip() == f"berth {version('berth')}"
    completion = run(["--show-completion", "bash"], nothing_running)
    assert completion.returncode == 0 and "_BERTH_COMPLETE" in completion.stdout
    helped = run(["--help"], nothing_running)
    assert "--install-completion" in helped.stdout and "Exit status" in helped.stdout
    for code in (2, 3, 4, 69):
        assert f" {code}  " in helped.stdout

    env = {
        **nothing_running,
        "BERTH_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "BERTH_KAFKA__SASL_MECHANISM": "PLAIN",
        "BERTH_KAFKA__SASL_USERNAME": "berth",
        "BERTH_KAFKA__SASL_PASSWORD": "hunter2",
        "BERTH_SNAPSHOT_EVERY": "7",
    }
    shown = json.loads(run(["config", "show", "--output", "json"], env).stdout)
    from berth.settings import BerthSettings

    assert set(shown) == set(BerthSettings.model_fields)
    assert shown["snapshot_every"] == 7 and shown["kafka"]["sasl_username"] == "berth"
    assert shown["kafka"]["sasl_password"] == "***"
    assert shown["database"]["url"].startswith("postgresql+psycopg://berth:***@127.0.0.1:")
    as_yaml = run(["config", "show"], env)
    assert as_yaml.returncode == 0 and "hunter2" not in as_yaml.stdout and "s3cret" not in as_yaml.stdout
    assert "snapshot_every: 7" in as_yaml.stdout


def test_each_class_of_failure_has_its_status() -> None:
    """The classes the nothing-running run cannot reach: refusals, the apiserver's answers, bugs."""
    import aiokafka.errors
    import sqlalchemy.exc
    from kubernetes.client.exceptions import ApiException

    from berth.bus.streams import StartupError
    from berth.cli import EXIT_NOPERM, EXIT_SOFTWARE, describe_failure

    def status(exc: BaseException, argv: tuple[str, ...] = ()) -> int:
        code, message = describe_failure(exc, argv)
        assert "\n" not in message and message
        return code

    def raised(exc: BaseException, cause: BaseException) -> BaseException:
        try:
            raise exc from cause
        except BaseException as caught:
            return caught

    assert status(aiokafka.errors.SaslAuthenticationFailed("bad password")) == EXIT_NOPERM
    assert status(aiokafka.errors.KafkaConnectionError("Unable to bootstrap"), ("--kafka", "k:1")) == EXIT_UNAVAILABLE
    assert describe_failure(aiokafka.errors.KafkaConnectionError("x"), ("--kafka", "k:1"))[1].startswith(
        "cannot reach Kafka at k:1 (--kafka)"
    )
    assert status(raised(StartupError("cannot prepare"), aiokafka.errors.KafkaTimeoutError())) == EXIT_UNAVAILABLE
    assert status(ApiException(status=403, reason="Forbidden")) == EXIT_NOPERM
    assert status(ApiException(status=404, reason="Not Found")) == EXIT_NOT_FOUND
    assert status(ApiException(status=503, reason="Service Unavailable")) == EXIT_UNAVAILABLE
    refused = sqlalchemy.exc.OperationalError(
        "SELECT 1", {}, Exception('connection failed: FATAL:  password authentication failed for user "berth"')
    )
    assert status(refused) == EXIT_NOPERM
    assert status(PermissionError(13, "Permission denied", "/etc/berth.yaml")) == EXIT_NOPERM
    assert status(FileNotFoundError(2, "No such file or directory", "pools.yaml")) == EXIT_NOT_FOUND
    code, message = describe_failure(ZeroDivisionError("division by zero"))
    assert code == EXIT_SOFTWARE and "--debug" in message and "ZeroDivisionError" in message


def test_ctrl_c_exits_130(tmp_path: Path) -> None:
    script = (
        "import os, signal, sys, threading, time\n"
        # A shell runs background jobs with SIGINT ignored, and children inherit that: restore
        # the default so that the test does not depend on how its runner was started.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from berth.cli import app\n"
        "@app.command('sleepy', hidden=True)\n"
        "def sleepy():\n"
        "    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "    time.sleep(30)\n"
        "sys.argv[0] = 'berth'\n"
        "app()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "sleepy"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 130 and done.stderr.strip() == "interrupted", done.stderr
