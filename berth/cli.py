"""The ``berth`` command line: one entry point for services, tools and the local stack.

Each sub-app lives beside the code it drives; this module wires them together and makes every
command fail the same way (see :class:`BerthGroup`): one line on stderr saying what failed and
what to do, an exit status per class of failure (:data:`EXIT_CODES`, listed in ``berth --help``),
and a traceback only with ``--debug``.
The commands of the development tooling (``berth dev``, ``berth demo``, ``berth cluster-sim``)
come from the berth-dev distribution through entry points (:mod:`berth.plugins`); without it they
say how to install it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from datetime import UTC
from typing import Annotated, Any

import typer
import typer.core
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from berth.options import DatabaseOption, KafkaOption
from berth.plugins import CLI_PLUGINS, INSTALL_DEV_TOOLING, load_plugin, plugin_names

# --- exit statuses ----------------------------------------------------------------------------

EXIT_FAILURE = 1
"""The command ran and reports a negative result (stale schemas, replay mismatches, nothing explained)."""
EXIT_USAGE = 2
"""Bad command line or bad input: an unknown option, a file whose content Berth cannot accept."""
EXIT_NOT_FOUND = 3
"""Nothing to read: a file or directory that does not exist (``berth simulate``'s 3 too)."""
EXIT_SETTINGS = 4
"""Settings invalid: a ``BERTH_*`` variable, the ``BERTH_CONFIG`` file, a kubeconfig."""
EXIT_UNAVAILABLE = 69
"""A service Berth needs is unreachable or refused: Kafka, Postgres, the Kubernetes API server
(sysexits ``EX_UNAVAILABLE``)."""
EXIT_SOFTWARE = 70
"""A bug: an error Berth does not know (sysexits ``EX_SOFTWARE``); ``--debug`` shows the traceback."""
EXIT_NOPERM = 77
"""Refused for lack of permission: authentication or authorisation failed, a file not readable
(sysexits ``EX_NOPERM``)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""

EXIT_CODES = {
    0: "success",
    EXIT_FAILURE: "the command's own negative result (stale schemas, replay mismatches, ...)",
    EXIT_USAGE: "usage error or bad input (options, file contents)",
    EXIT_NOT_FOUND: "not found (no such file or directory, nothing to read)",
    EXIT_SETTINGS: "settings invalid (BERTH_* variables, BERTH_CONFIG, kubeconfig)",
    EXIT_UNAVAILABLE: "a service is unreachable: Kafka, Postgres or the Kubernetes API server",
    EXIT_SOFTWARE: "internal error (a bug: rerun with --debug and report it)",
    EXIT_NOPERM: "permission denied (authentication, authorisation, file permissions)",
    EXIT_INTERRUPTED: "interrupted",
}

EPILOG = (
    "[b]Exit status[/b] (errors are one line on stderr; --debug or BERTH_DEBUG=1 adds the traceback):\n"
    + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES.items())
)


class BerthGroup(typer.core.TyperGroup):
    """The root command: runs the sub-command and turns what escapes it into one line on stderr
    and the exit status of its class (:func:`describe_failure`). Usage errors and the commands'
    own exits pass through as they are."""

    argv: Sequence[str] = ()

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        BerthGroup.argv = tuple(args)  # for the failure messages: which --kafka, --database-url
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # before click turns it into "Aborted!" and 1
            print("interrupted", file=sys.stderr, flush=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as exc:  # every failure of every command, in one place
            module = type(exc).__module__
            if module.startswith("typer."):  # typer's click: usage errors, Exit, Abort
                raise
            if module.startswith("click."):  # the click package's (a plugin built on it)
                raise _from_click(exc) from exc
            return self._fail(ctx, exc)

    def _fail(self, ctx: Any, exc: Exception) -> Any:
        code, message = describe_failure(exc, self.argv)
        if ctx.params.get("debug") or _truthy(os.environ.get("BERTH_DEBUG")):
            traceback.print_exception(exc, file=sys.stderr)
        print(f"error: {message}", file=sys.stderr, flush=True)
        raise typer.Exit(code)


def _from_click(exc: Exception) -> Exception:
    """The click package's exception as typer's click handles it: shown, then its exit status."""
    show = getattr(exc, "show", None)
    if show is not None:
        show()
    code = getattr(exc, "exit_code", None)
    return typer.Exit(code if isinstance(code, int) else EXIT_FAILURE)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            yield from _chain(current.exceptions[0])
        current = current.__cause__ or current.__context__


def _one_line(text: object, limit: int = 400) -> str:
    """A message on one line: its lines joined, sqlalchemy's background links dropped."""
    lines = [line.strip() for line in str(text).splitlines()]
    lines = [line for line in lines if line and not line.startswith("(Background on this error")]
    joined = "; ".join(lines) or "no details"
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def _reason(exc: BaseException) -> str:
    text = _one_line(exc)
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``argv`` (the last one given)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _settings_or_none() -> Any:
    try:
        from berth.settings import load_settings

        return load_settings()
    except Exception:  # the settings are what failed, or not loadable: say what we can
        return None


def _kafka_target(argv: Sequence[str]) -> tuple[str, str]:
    """(bootstrap servers, where they came from) for the command that failed."""
    given = _option(argv, "--kafka")
    if given:
        return given, "--kafka"
    settings = _settings_or_none()
    bootstrap = settings.kafka.bootstrap if settings is not None else os.environ.get("BERTH_KAFKA_BOOTSTRAP", "?")
    for variable in ("BERTH_KAFKA_BOOTSTRAP", "BERTH_KAFKA__BOOTSTRAP"):
        if os.environ.get(variable):
            return bootstrap, variable
    return bootstrap, "default; set BERTH_KAFKA_BOOTSTRAP"


def _database_target(argv: Sequence[str]) -> tuple[str, str]:
    from berth.settings import redact_url

    given = _option(argv, "--database-url")
    if given:
        return redact_url(given), "--database-url"
    settings = _settings_or_none()
    url = settings.database.redacted_url() if settings is not None else "?"
    for variable in ("BERTH_DATABASE_URL", "BERTH_DATABASE__URL"):
        if os.environ.get(variable):
            return url, variable
    return url, "default; set BERTH_DATABASE_URL"


def _from_settings_module(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while loading Berth's settings (environment, BERTH_CONFIG)."""
    import berth.settings

    settings_file = os.path.normcase(berth.settings.__file__)
    for link in _chain(exc):
        if isinstance(link, ValidationError) and link.title in ("BerthSettings", "KafkaSettings", "DatabaseSettings"):
            return True
        for frame, _ in traceback.walk_tb(link.__traceback__):
            if os.path.normcase(frame.f_code.co_filename) == settings_file:
                return True
    return False


def _settings_problems(exc: ValidationError) -> str:
    """Each problem under the variable that sets it: ``BERTH_LOG_LEVEL='loud': Input should be ...``."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        if exc.title in ("KafkaSettings", "DatabaseSettings"):
            loc.insert(0, exc.title.removesuffix("Settings").lower())
        variable = "BERTH_" + "__".join(loc).upper() if loc else "settings"
        given = error.get("input")
        shown = "" if not loc or isinstance(given, dict) or given is None else f"={given!r}"
        if any(secret in variable for secret in ("PASSWORD", "URL", "SECRET")):
            shown = ""
        problems.append(f"{variable}{shown}: {_one_line(error['msg'])}")
    return "; ".join(problems)


def _isinstance(exc: BaseException, module: str, names: tuple[str, ...]) -> bool:
    """``isinstance(exc, module.name)`` for any of ``names``, without importing ``module`` when
    the command never did (a library that is not loaded raised nothing)."""
    loaded = sys.modules.get(module)
    if loaded is None:
        return False
    classes = tuple(getattr(loaded, name) for name in names if hasattr(loaded, name))
    return bool(classes) and isinstance(exc, classes)


_KAFKA_AUTH = (
    "AuthenticationFailedError",
    "SaslAuthenticationFailed",
    "TopicAuthorizationFailedError",
    "GroupAuthorizationFailedError",
    "ClusterAuthorizationFailedError",
    "TransactionalIdAuthorizationFailed",
    "UnsupportedSaslMechanismError",
    "AuthenticationMethodNotSupported",
    "IllegalSaslStateError",
)
_START_KAFKA = "start it with `berth dev up` (or `make up`)"
_KAFKA_ACCESS = ("SaslAuthenticationFailed", "UnsupportedSaslMechanismError")
_KAFKA_UNREACHED = ("KafkaConnectionError", "NoBrokersAvailable", "KafkaTimeoutError", "RequestTimedOutError")


def _kafka_refusal(argv: Sequence[str], chain: list[BaseException]) -> tuple[int, str] | None:
    """The exit status and message for a secured Kafka that refused Berth's TLS or SASL
    settings, naming the setting to fix; None when that is not what failed. aiokafka hides
    these behind "Unable to bootstrap", so when the chain holds no such error a single probe
    connection (:func:`berth.bus.access.kafka_access_error`) asks the broker again."""
    import ssl

    settings = _settings_or_none()
    if settings is None or settings.kafka.security_protocol == "PLAINTEXT":
        return None
    kafka = settings.kafka
    given = _option(argv, "--kafka")
    if given:
        kafka = kafka.model_copy(update={"bootstrap": given})
    error = next(
        (
            link
            for link in chain
            if isinstance(link, ssl.SSLError) or _isinstance(link, "aiokafka.errors", _KAFKA_ACCESS)
        ),
        None,
    )
    unreached = any(_isinstance(link, "aiokafka.errors", _KAFKA_UNREACHED) for link in chain) or any(
        _isinstance(link, "berth.bus.streams", ("StartupError",)) for link in chain
    )
    if error is None and unreached:
        from berth.bus.access import kafka_access_error

        try:
            error = asyncio.run(kafka_access_error(kafka))
        except Exception:  # no probe possible here (a running loop): report what we have
            return None
    return _kafka_access_message(kafka, error) if error is not None else None


def _kafka_access_message(kafka: Any, error: BaseException) -> tuple[int, str]:
    import ssl

    where = f"kafka at {kafka.bootstrap} ({kafka.security_protocol})"
    if _isinstance(error, "aiokafka.errors", ("SaslAuthenticationFailed",)):
        return EXIT_NOPERM, (
            f"kafka: authentication failed (SASL {kafka.sasl_mechanism}) for user {kafka.sasl_username} at "
            f"{kafka.bootstrap}; check BERTH_KAFKA__SASL_PASSWORD (and BERTH_KAFKA__SASL_USERNAME)"
        )
    if _isinstance(error, "aiokafka.errors", ("UnsupportedSaslMechanismError",)):
        return EXIT_SETTINGS, f"{where}: {_one_line(error)}; set BERTH_KAFKA__SASL_MECHANISM to one it enables"
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = error.verify_message or _one_line(error)
        if error.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
            return EXIT_UNAVAILABLE, (
                f"{where}: the broker's TLS certificate does not name that host ({reason}); connect by a name it "
                "carries (BERTH_KAFKA_BOOTSTRAP) or set BERTH_KAFKA__SSL_CHECK_HOSTNAME=false"
            )
        cafile = kafka.ssl_cafile or "unset, so the system's CAs"
        return EXIT_UNAVAILABLE, (
            f"{where}: the broker's TLS certificate is not trusted ({reason}); check BERTH_KAFKA__SSL_CAFILE "
            f"({cafile}): it must hold the CA that signed the broker's certificate"
        )
    if isinstance(error, ssl.SSLError):
        return EXIT_UNAVAILABLE, (
            f"{where}: the TLS handshake failed ({_reason(error)}); check that BERTH_KAFKA__SECURITY_PROTOCOL "
            "matches the broker's listener, and BERTH_KAFKA__SSL_CERTFILE/SSL_KEYFILE if it wants a client certificate"
        )
    return EXIT_NOPERM, f"{where} refused Berth: {_reason(error)}; check BERTH_KAFKA__SASL_* and BERTH_KAFKA__SSL_*"


def _database_tls_problem(text: str, url: str) -> tuple[int, str] | None:
    """The exit status and message for a Postgres that refused Berth's TLS settings (libpq's
    ``text``), naming the setting to fix; None when TLS is not what failed."""
    settings = _settings_or_none()
    rootcert = getattr(getattr(settings, "database", None), "sslrootcert", None) or "unset"
    if "certificate verify failed" in text:
        return EXIT_UNAVAILABLE, (
            f"postgres at {url}: the server's TLS certificate is not trusted ({text}); check "
            f"BERTH_DATABASE__SSLROOTCERT ({rootcert}): it must hold the CA that signed the server's certificate"
        )
    if "does not match host name" in text:
        return EXIT_UNAVAILABLE, (
            f"postgres at {url}: {text}; connect by a name the certificate carries (BERTH_DATABASE_URL) or "
            "set BERTH_DATABASE__SSLMODE=verify-ca"
        )
    if "root certificate file" in text:
        return EXIT_SETTINGS, f"postgres at {url}: {text}; set BERTH_DATABASE__SSLROOTCERT to the CA's PEM file"
    if "no pg_hba.conf entry" in text and "no encryption" in text:
        return EXIT_NOPERM, (
            f"postgres at {url} accepts only TLS connections ({text}); set BERTH_DATABASE__SSLMODE=verify-full "
            "and BERTH_DATABASE__SSLROOTCERT"
        )
    return None


def describe_failure(exc: BaseException, argv: Sequence[str] = ()) -> tuple[int, str]:
    """The exit status and the one-line message for a failure that escaped a command: what
    failed, where, and what to do. The classes are checked on the whole chain of causes (a
    service's StartupError over aiokafka's error, SQLAlchemy's over psycopg's); settings first
    (a bad BERTH_CONFIG is a FileNotFoundError or a YAML error too), then each service Berth
    talks to, then local files and input."""
    chain = list(_chain(exc))
    for describe in (_settings_failure, _kafka_failure, _database_failure, _kubernetes_failure, _input_failure):
        described = describe(chain, argv)
        if described is not None:
            return described
    return EXIT_SOFTWARE, (f"internal error: {_reason(exc)}; rerun with --debug for the traceback and report it")


def _find(chain: Sequence[BaseException], module: str, *names: str) -> BaseException | None:
    return next((link for link in chain if _isinstance(link, module, names)), None)


def _settings_failure(chain: list[BaseException], argv: Sequence[str]) -> tuple[int, str] | None:
    """Invalid settings: the environment or the BERTH_CONFIG file."""
    if _from_settings_module(chain[0]):
        invalid = next((link for link in chain if isinstance(link, ValidationError)), None)
        if invalid is None:
            return EXIT_SETTINGS, f"invalid settings: {_one_line(chain[0])}"
        return EXIT_SETTINGS, (
            f"invalid settings: {_settings_problems(invalid)}; fix the environment "
            "variable or the BERTH_CONFIG file's key"
        )
    return None


def _kafka_failure(chain: list[BaseException], argv: Sequence[str]) -> tuple[int, str] | None:
    """Kafka unreachable, refusing the credentials or the TLS handshake, or failing a request."""
    kafka = _find(chain, "aiokafka.errors", "KafkaError")
    if kafka is not None or _find(chain, "berth.bus.streams", "StartupError") is not None:
        refused = _kafka_refusal(argv, chain)
        if refused is not None:
            return refused
        bootstrap, source = _kafka_target(argv)
        if kafka is not None and _isinstance(kafka, "aiokafka.errors", _KAFKA_AUTH):
            return EXIT_NOPERM, (
                f"Kafka at {bootstrap} refused Berth's credentials or access: {_reason(kafka)}; "
                "check BERTH_KAFKA__SASL_* and the ACLs"
            )
        if kafka is None or _isinstance(
            kafka,
            "aiokafka.errors",
            ("KafkaConnectionError", "NoBrokersAvailable", "KafkaTimeoutError", "RequestTimedOutError"),
        ):
            cause = _reason(kafka) if kafka is not None else _one_line(chain[0])
            if "Unable to bootstrap" in cause:  # aiokafka's says which addresses, not why
                cause = "no broker answered (connection refused, host unknown or unreachable)"
            return EXIT_UNAVAILABLE, (
                f"cannot reach Kafka at {bootstrap} ({source}): {cause}; {_START_KAFKA} or set BERTH_KAFKA_BOOTSTRAP"
            )
        return EXIT_UNAVAILABLE, f"Kafka at {bootstrap} ({source}) failed the request: {_reason(kafka)}"
    return None


def _database_failure(chain: list[BaseException], argv: Sequence[str]) -> tuple[int, str] | None:
    """The audit database: TLS, credentials, unreachable, not migrated, or a bad URL."""
    database = _find(chain, "sqlalchemy.exc", "DBAPIError") or _find(chain, "psycopg", "Error")
    if database is not None:
        url, source = _database_target(argv)
        text = _one_line(getattr(database, "orig", None) or database)
        tls_problem = _database_tls_problem(text, url)
        if tls_problem is not None:
            return tls_problem
        if "authentication failed" in text or "permission denied" in text:
            return EXIT_NOPERM, (
                f"the audit database at {url} ({source}) refused Berth: {text}; "
                "check the user and password in BERTH_DATABASE_URL"
            )
        if _find(chain, "sqlalchemy.exc", "OperationalError", "InterfaceError") or _find(
            chain, "psycopg", "OperationalError"
        ):
            return EXIT_UNAVAILABLE, (
                f"cannot reach the audit database at {url} ({source}): {text}; "
                "start it with `berth dev up` (or `make up`) or set BERTH_DATABASE_URL"
            )
        if "does not exist" in text and ("relation" in text or "table" in text):
            return EXIT_UNAVAILABLE, (
                f"the audit database at {url} has no audit tables ({text}); run `berth db upgrade`"
            )
        return EXIT_UNAVAILABLE, f"the audit database at {url} ({source}) failed the request: {text}"
    database_url = _find(chain, "sqlalchemy.exc", "ArgumentError", "NoSuchModuleError")
    if database_url is not None:
        url, source = _database_target(argv)
        return EXIT_SETTINGS, (
            f"the database URL {url} ({source}) is not usable: {_one_line(database_url)}; "
            "use e.g. postgresql+psycopg://USER:PASSWORD@HOST:5432/berth"
        )
    return None


def _kubernetes_failure(chain: list[BaseException], argv: Sequence[str]) -> tuple[int, str] | None:
    """The Kubernetes API server: its answer, unreachable, or no usable kubeconfig."""
    api = _find(chain, "kubernetes.client.exceptions", "ApiException")
    if api is not None:
        status = getattr(api, "status", 0) or 0
        what = f"the Kubernetes API server answered {status} {getattr(api, 'reason', '') or ''}".rstrip()
        if status in (401, 403):
            return EXIT_NOPERM, f"{what}: check the kubeconfig's credentials and Berth's RBAC (deploy/)"
        if status == 404:
            return EXIT_NOT_FOUND, f"{what}: {_one_line(getattr(api, 'body', '') or api)}"
        return EXIT_UNAVAILABLE, f"{what}: {_one_line(getattr(api, 'body', '') or api, 200)}"
    unreachable = _find(chain, "urllib3.exceptions", "HTTPError")
    if unreachable is not None:
        pool = getattr(unreachable, "pool", None)
        where = f"{pool.host}:{pool.port}" if pool is not None else "its address"
        reason = getattr(unreachable, "reason", None) or unreachable
        return EXIT_UNAVAILABLE, (
            f"cannot reach the Kubernetes API server at {where}: {_reason(reason)}; "
            "check the kubeconfig (--kubeconfig, KUBECONFIG) and that the cluster runs"
        )
    kubeconfig = _find(chain, "kubernetes.config.config_exception", "ConfigException")
    if kubeconfig is not None:
        return EXIT_SETTINGS, (
            f"cannot load a Kubernetes configuration: {_one_line(kubeconfig)}; pass "
            "--kubeconfig (and --context), set KUBECONFIG, or run in a pod with a ServiceAccount"
        )
    return None


def _input_failure(chain: list[BaseException], argv: Sequence[str]) -> tuple[int, str] | None:
    """Local files and input (missing, unreadable, not YAML/JSON, invalid), then bare connection errors."""
    for link in chain:
        if isinstance(link, (FileNotFoundError, NotADirectoryError)):
            name = link.filename if link.filename is not None else _one_line(link)
            return EXIT_NOT_FOUND, f"no such file or directory: {name}"
        if isinstance(link, PermissionError):
            return EXIT_NOPERM, f"permission denied: {link.filename or _one_line(link)}"
        if isinstance(link, IsADirectoryError):
            return EXIT_USAGE, f"{link.filename}: is a directory, a file is expected"
        if _isinstance(link, "yaml", ("YAMLError",)):
            return EXIT_USAGE, f"not valid YAML: {_one_line(link)}"
        if isinstance(link, (json.JSONDecodeError, UnicodeDecodeError)):
            return (
                EXIT_USAGE,
                f"not valid {'JSON' if isinstance(link, json.JSONDecodeError) else 'text'}: {_one_line(link)}",
            )
        if isinstance(link, ValidationError):
            return EXIT_USAGE, f"invalid input ({link.title}): {_validation_message(link)}"
    for link in chain:
        if isinstance(link, (ConnectionError, TimeoutError)) or _isinstance(link, "socket", ("gaierror",)):
            return EXIT_UNAVAILABLE, f"cannot connect: {_reason(link)}; is the service it needs running?"
    return None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


app = typer.Typer(
    name="berth",
    cls=BerthGroup,
    help="Berth: an event-sourced, GPU-aware scheduler for Kubernetes on Kafka.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
publish_app = typer.Typer(
    help="Publish events to Berth (for gateways, model servers, cloud hooks).", no_args_is_help=True
)
db_app = typer.Typer(help="Manage the audit store's schema (Alembic migrations).", no_args_is_help=True)
schemas_app = typer.Typer(help="The event contract's JSON Schemas.", no_args_is_help=True)
topics_app = typer.Typer(help="Berth's Kafka topics.", no_args_is_help=True)
config_app = typer.Typer(help="Berth's settings as a process sees them.", no_args_is_help=True)

DEV_TOOLING_COMMANDS = ("dev", "demo", "cluster-sim")
"""Commands the development tooling (berth-dev) provides, in the order of ``berth --help``."""


def _add_plugin_command(name: str) -> None:
    """Add command ``name`` from the ``berth.cli_plugins`` entry points: a Typer as a command
    group, a function as one command. When no installed distribution provides it, a hidden
    command takes its place that takes any arguments and says to install the development tooling."""
    command = load_plugin(CLI_PLUGINS, name)
    if isinstance(command, typer.Typer):
        app.add_typer(command, name=name)
    elif command is not None:
        app.command(name)(command)
    else:

        def missing() -> None:
            raise fail(f"`berth {name}` comes with Berth's development tooling: {INSTALL_DEV_TOOLING}")

        app.command(
            name,
            hidden=True,
            add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(missing)


_add_plugin_command("dev")
app.add_typer(publish_app, name="publish")
app.add_typer(db_app, name="db")
app.add_typer(schemas_app, name="schemas")
app.add_typer(topics_app, name="topics")
app.add_typer(config_app, name="config")

err = Console(stderr=True)


def fail(message: str, code: int = EXIT_FAILURE) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def _settings(kafka: str | None = None, database_url: str | None = None) -> Any:
    """The settings with the command line's overrides; invalid ones fail as settings (exit 4)."""
    from berth.settings import load_settings

    return load_settings(kafka=kafka, database_url=database_url)


# --- the root command: --version, --debug, logging ------------------------------------------------


def _version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("berth")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from berth import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"berth {_version()}")
        raise typer.Exit()


LOG_FORMATS = ("json", "console")


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print Berth's version (of the installed distribution) and exit.",
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="On failure, print the traceback before the one-line error; log everything "
            "at debug level (also BERTH_DEBUG=1).",
        ),
    ] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            show_default=False,
            metavar="json|console",
            help="Log lines as JSON objects (default) or for people (console); sets BERTH_LOG_FORMAT for "
            "the services this command runs.",
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            show_default=False,
            metavar="debug|info|warning|error",
            help="Level of Berth's own log records; sets BERTH_LOG_LEVEL.",
        ),
    ] = None,
) -> None:
    """Berth: an event-sourced, GPU-aware scheduler for Kubernetes on Kafka."""
    from berth.logs import configure_logging

    if log_format is not None:
        if log_format not in LOG_FORMATS:
            raise typer.BadParameter(f"{log_format!r}: choose json or console", param_hint="--log-format")
        os.environ["BERTH_LOG_FORMAT"] = log_format
    if log_level is not None:
        if log_level not in ("debug", "info", "warning", "error"):
            raise typer.BadParameter(f"{log_level!r}: choose debug, info, warning or error", param_hint="--log-level")
        os.environ["BERTH_LOG_LEVEL"] = log_level
    # A database that does not answer (a dropped SYN) fails in seconds, not after the kernel's
    # two minutes: libpq reads this for every connection (psycopg, the audit service included).
    os.environ.setdefault("PGCONNECT_TIMEOUT", "10")
    debug = debug or _truthy(os.environ.get("BERTH_DEBUG"))
    if debug:
        os.environ["BERTH_DEBUG"] = "1"
        os.environ["BERTH_LOG_LEVEL"] = "debug"
    fmt = os.environ.get("BERTH_LOG_FORMAT", "json")
    level = os.environ.get("BERTH_LOG_LEVEL", "warning")
    # One-shot commands: the libraries' records stay quiet (the one-line error says what failed);
    # a service's `run` configures logging again with its settings and its name.
    configure_logging(
        "debug" if debug else (level if level in ("info", "warning", "error") else "warning"),
        fmt if fmt in LOG_FORMATS else "json",
        library_level="debug" if debug else "critical",
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``"120s"``, ``"2m"``, ``"1.5h"``, ``"90"`` (seconds) → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration; use e.g. 120s, 2m or 1h")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def _validation_message(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors(include_url=False)
    )


# --- publish -----------------------------------------------------------------------------------


def _publish(kafka: str | None, build: Any) -> None:
    from berth.client import publish_sync

    settings = _settings(kafka)
    try:
        event = build()
    except ValidationError as exc:
        raise fail(f"refused: {_validation_message(exc)}", EXIT_USAGE) from exc
    publish_sync(settings.kafka, event, source="berth-cli")  # unreachable Kafka: BerthGroup says so
    print(event.model_dump_json())


@publish_app.command("queue-lag")
def publish_queue_lag(
    pool: Annotated[str, typer.Option(help="Inference pool (AgentPool) name.")],
    tokens: Annotated[int, typer.Option(help="Tokens waiting in the pool's queue.")],
    rate: Annotated[float, typer.Option(help="Tokens per second the pool is processing now.")],
    namespace: Annotated[str, typer.Option(help="Namespace of the pool.")] = "default",
    sessions: Annotated[int, typer.Option(help="Active sessions.")] = 0,
    context: Annotated[int | None, typer.Option(help="Mean context length in tokens.")] = None,
    ttft_ms: Annotated[float | None, typer.Option(help="Observed time to first token, ms.")] = None,
    kafka: KafkaOption = None,
) -> None:
    """Report an inference pool's token-queue lag (what gateways and model servers send)."""
    from datetime import datetime

    from berth.schemas import QueueLagObserved

    _publish(
        kafka,
        lambda: QueueLagObserved(
            pool=pool,
            namespace=namespace,
            tokens_in_queue=tokens,
            token_rate=rate,
            active_sessions=sessions,
            mean_context_tokens=context,
            observed_ttft_ms=ttft_ms,
            observed_at=datetime.now(UTC),
        ),
    )


@publish_app.command("spot-notice")
def publish_spot_notice(
    node: Annotated[str, typer.Option(help="The spot node to be reclaimed.")],
    in_: Annotated[str, typer.Option("--in", help="Time until reclaim, e.g. 120s (AWS) or 30s (GCP).")],
    provider: Annotated[str, typer.Option(help="aws, gcp, azure or other.")] = "other",
    kafka: KafkaOption = None,
) -> None:
    """Report that a spot node will be reclaimed soon."""
    from datetime import datetime, timedelta

    from berth.schemas import SpotInterruptionNotice

    seconds = parse_duration(in_)
    if seconds <= 0:
        raise fail(f"--in must be positive, got {in_!r}", 2)
    now = datetime.now(UTC)
    _publish(
        kafka,
        lambda: SpotInterruptionNotice(
            node=node, issued_at=now, deadline=now + timedelta(seconds=seconds), provider=provider
        ),
    )


@publish_app.command("gpu-telemetry")
def publish_gpu_telemetry(
    node: Annotated[str, typer.Option(help="Node the GPUs belong to.")],
    device: Annotated[
        list[str], typer.Option(help="INDEX:UTIL_PCT:MEM_USED_MIB[:unhealthy], repeatable, e.g. --device 0:85:40960")
    ],
    kafka: KafkaOption = None,
) -> None:
    """Report one sample of a node's GPU utilisation, memory and health."""
    from datetime import datetime

    from berth.schemas import GpuDeviceSample, GpuTelemetry

    samples = []
    for spec in device:
        parts = spec.split(":")
        if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "unhealthy"):
            raise fail(f"--device {spec!r}: expected INDEX:UTIL_PCT:MEM_USED_MIB[:unhealthy]", 2)
        try:
            samples.append(
                GpuDeviceSample(
                    index=int(parts[0]),
                    utilization_pct=float(parts[1]),
                    memory_used_mib=int(parts[2]),
                    healthy=len(parts) == 3,
                )
            )
        except (ValueError, ValidationError) as exc:
            detail = _validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
            raise fail(f"--device {spec!r}: {detail}", EXIT_USAGE) from exc
    _publish(kafka, lambda: GpuTelemetry(node=node, devices=tuple(samples), sampled_at=datetime.now(UTC)))


# --- topics ------------------------------------------------------------------------------------


@topics_app.command("create")
def topics_create(kafka: KafkaOption = None) -> None:
    """Create every Berth topic that does not exist yet (idempotent)."""
    from berth.bus import ensure_topics

    settings = _settings(kafka)
    created = asyncio.run(ensure_topics(settings.kafka))
    err.print(f"created {len(created)} topic(s)" + (f": {', '.join(created)}" if created else ""))


@topics_app.command("list")
def topics_list() -> None:
    """List Berth's topics: name (on the brokers: with BERTH_KAFKA__TOPIC_PREFIX), key, partitions,
    event types."""
    from rich.table import Table

    from berth.schemas import ALL_TOPICS

    kafka = _settings().kafka
    names = kafka.names
    table = Table()
    table.add_column("topic", no_wrap=True)
    table.add_column("key")
    table.add_column("partitions", justify="right")
    table.add_column("events", overflow="fold")
    for topic in ALL_TOPICS:
        table.add_row(names.topic(topic), topic.key, str(kafka.partitions(topic)), "\n".join(sorted(topic.event_types)))
    Console().print(table)


# --- config ------------------------------------------------------------------------------------


def effective_settings() -> dict[str, Any]:
    """Every BerthSettings field as this process resolves it (defaults, BERTH_CONFIG, environment),
    secrets masked: SecretStr fields as ``***``, passwords inside URLs as ``user:***@``."""
    from pydantic import BaseModel, SecretStr

    from berth.settings import BerthSettings, load_settings, redact_url

    settings = load_settings()

    def plain(value: Any) -> Any:
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            return redact_url(secret) if "://" in secret else "***"
        if isinstance(value, BaseModel):
            return {name: plain(getattr(value, name)) for name in type(value).model_fields}
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, str):
            return redact_url(value) if "://" in value and "@" in value else value
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return str(value)

    shown = plain(settings)
    assert set(shown) == set(BerthSettings.model_fields)
    return shown


@config_app.command("show")
def config_show(
    output: Annotated[
        str, typer.Option("--output", "-o", metavar="yaml|json", help="yaml (default) or json.")
    ] = "yaml",
) -> None:
    """Print the effective settings: every field, from the defaults, the BERTH_CONFIG file and the
    BERTH_* environment merged (the environment wins), secrets masked."""
    if output not in ("yaml", "json"):
        raise typer.BadParameter(f"{output!r}: choose yaml or json", param_hint="--output")
    shown = effective_settings()
    if output == "json":
        print(json.dumps(shown, indent=2))
        return
    import yaml

    source = os.environ.get("BERTH_CONFIG")
    print(
        f"# effective settings: defaults < {'BERTH_CONFIG=' + source if source else 'no BERTH_CONFIG file'}"
        " < BERTH_* environment"
    )
    print(yaml.safe_dump(shown, sort_keys=False, default_flow_style=False), end="")


@app.command("tail")
def tail(
    topic: Annotated[
        str,
        typer.Argument(
            help="Topic to read, e.g. berth.inference.queue.v1 (the installation's: BERTH_KAFKA__TOPIC_PREFIX "
            "goes before it)."
        ),
    ],
    max_events: Annotated[int, typer.Option("--max", help="Stop after this many events.")] = 100,
    timeout: Annotated[float, typer.Option(help="Stop after this many idle seconds.")] = 5.0,
    kafka: KafkaOption = None,
) -> None:
    """Print a topic's events from the beginning as JSON lines (through the contract)."""
    from berth.bus import EventConsumer

    settings = _settings(kafka)
    try:
        target = settings.kafka.names.contract_topic(topic)
    except KeyError as exc:
        raise fail(str(exc.args[0]), 2) from exc

    async def _run() -> int:
        count = 0
        async with EventConsumer(
            settings.kafka, [target], group_id=None, name="berth-tail", auto_commit=False
        ) as consumer:
            async for item in consumer.events(idle_timeout_s=timeout):
                print(
                    json.dumps(
                        {
                            "offset": item.offset,
                            "partition": item.partition,
                            "type": item.decoded.type,
                            "event": item.event.model_dump(mode="json"),
                        }
                    )
                )
                count += 1
                if count >= max_events:
                    break
        return count

    count = asyncio.run(_run())
    err.print(f"{count} event(s) from {settings.kafka.names.topic(target)}")


# --- db ----------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseOption = None,
) -> None:
    """Apply migrations up to REVISION (default: the latest)."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    db.upgrade(settings.database, revision)
    err.print(f"audit store at {db.current_revision(settings.database)} ({settings.database.redacted_url()})")


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base' removes everything).")],
    database_url: DatabaseOption = None,
) -> None:
    """Revert migrations down to REVISION."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    db.downgrade(settings.database, revision)
    err.print(f"audit store at {db.current_revision(settings.database) or 'base'}")


@db_app.command("current")
def db_current(database_url: DatabaseOption = None) -> None:
    """Print the audit store's current migration revision."""
    from berth.services.audit import db

    settings = _settings(database_url=database_url)
    print(db.current_revision(settings.database) or "base")


# --- schemas -----------------------------------------------------------------------------------


@schemas_app.command("export")
def schemas_export(
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing: exit 1 if a file is stale or the change is not releasable.")
    ] = False,
    allow_breaking: Annotated[
        bool, typer.Option(help="Write even if a change breaks consumers (only with a new topic version).")
    ] = False,
) -> None:
    """Rewrite schemas/jsonschema/*.json from the models, refusing what a deployed consumer or
    producer of the committed (released) schemas could not read.

    Within a major version a change may only add optional fields, under a raised minor version
    (the model's ``schema_minor``): consumers ignore unknown fields of a newer minor only.
    """
    from berth.schemas import compat, export

    committed = export.committed_schemas()
    generated = export.event_schemas()
    problems = compat.check(committed, generated)
    stale = sorted(
        name
        for name, schema in generated.items()
        if name not in committed or export.render(schema) != export.render(committed[name])
    )
    if problems and not allow_breaking:
        raise fail(
            "change(s) an older consumer or producer of the released schemas cannot survive:\n  "
            + "\n  ".join(problems)
            + "\nAdd optional fields under a raised schema_minor, or a new event version on a new topic; "
            "--allow-breaking writes anyway.",
            1,
        )
    if check:
        if stale:
            raise fail(
                f"{len(stale)} committed schema(s) differ from the models: {', '.join(stale)}; "
                "run `berth schemas export` and commit",
                1,
            )
        err.print(f"{len(committed)} committed schema(s) current" + (" (breaking changes allowed)" if problems else ""))
        return
    written = export.write_schemas()
    err.print(f"{len(written)} schema file(s) updated in {export.SCHEMA_DIR}")


_add_plugin_command("demo")


@app.command("version")
def version() -> None:
    """Print Berth's version (also `berth --version`)."""
    print(_version())


SERVICES = {
    "ingest": "ingest",
    "inventory": "inventory",
    "token-lag": "token_lag",
    "decision": "decision",
    "binder": "binder",
    "audit": "audit",
}
"""CLI name → package under services/. Each package's ``cli.py`` defines ``app`` (a Typer with a
``run`` command); heavy imports happen inside the commands, so ``berth --help`` stays fast."""


def _register_optional_commands() -> None:
    import importlib

    for name, package in SERVICES.items():
        module_name = f"berth.services.{package}.cli"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name in (module_name, f"berth.services.{package}"):
                continue  # that service is not part of this build
            raise
        app.add_typer(module.app, name=name)
    _add_plugin_command("cluster-sim")
    for name in plugin_names(CLI_PLUGINS):
        if name not in DEV_TOOLING_COMMANDS:
            _add_plugin_command(name)
    try:
        from berth.simulate import simulate
    except ModuleNotFoundError as exc:
        if exc.name != "berth.simulate":
            raise
    else:
        app.command("simulate", help=(simulate.__doc__ or "").strip().split("\n")[0] or None)(simulate)
    try:
        from berth.deschedule import deschedule
    except ModuleNotFoundError as exc:
        if exc.name != "berth.deschedule":
            raise
    else:
        app.command("deschedule", help=(deschedule.__doc__ or "").strip().split("\n")[0] or None)(deschedule)


_register_optional_commands()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
