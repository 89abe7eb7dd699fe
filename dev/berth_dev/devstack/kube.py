"""A real Kubernetes control plane (etcd + kube-apiserver, optionally kube-scheduler), no Docker.

The binaries come from :func:`berth_dev.devstack.gobuild.ensure_kubernetes_binaries` (built from the
Go module proxy once, cached under ``.cache/``). The apiserver runs envtest-style (DESIGN.md §6):
no kubelet, no controller-manager; nodes are plain API objects (:mod:`berth_dev.devstack.fakenodes`).

::

    with KubeControlPlane() as kube:
        api = kube.connection().api_client()
        CoreV1Api(api).list_namespace()

Everything a control plane writes (etcd's data, the apiserver's certificates, the token file,
the service-account key, the kubeconfig, both logs) lives in one temporary directory removed on
:meth:`KubeControlPlane.stop`; the processes follow the same lifetime rules as Kafka and Postgres
(:mod:`berth_dev.devstack.procs`).

Authentication is by static bearer tokens (``--token-auth-file``): ``berth-admin`` in
``system:masters`` and, by default, ``system:kube-scheduler`` (the user the bootstrap RBAC policy
grants kube-scheduler's permissions to). Pass ``users=`` for more static users (component
identities are known before the start), or mint ServiceAccount tokens at any time with
:meth:`KubeControlPlane.service_account_kubeconfig` (TokenRequest, signed with our key).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from berth_dev.devstack import procs
from berth_dev.devstack.gobuild import KubeBinaries, ensure_kubernetes_binaries
from berth_dev.devstack.procs import DevStackError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

ADMIN_USER = "berth-admin"
SCHEDULER_USER = "system:kube-scheduler"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

#: Admission plugins turned off on top of the defaults. ServiceAccount: there is no token
#: controller to create the default ServiceAccount, so pods would be rejected (envtest does the
#: same). TaintNodesByCondition: it taints every new Node ``node.kubernetes.io/not-ready`` and only
#: the node lifecycle controller (in kube-controller-manager, not run here) removes the taint, so
#: no fake node would ever be schedulable.
DISABLED_ADMISSION_PLUGINS = ("ServiceAccount", "TaintNodesByCondition")

OPENSSL_HINT = "Install openssl (apt-get install openssl): it generates the service-account signing key."


@dataclass(frozen=True)
class KubeUser:
    """A static user of the apiserver's token file: ``token,name,uid,"group1,group2"``."""

    name: str
    groups: tuple[str, ...] = ()
    token: str = field(default_factory=lambda: secrets.token_hex(24))

    def csv_line(self) -> str:
        groups = ",".join(self.groups)
        return f'{self.token},{self.name},{self.name},"{groups}"\n'


def default_users() -> list[KubeUser]:
    return [KubeUser(ADMIN_USER, ("system:masters",)), KubeUser(SCHEDULER_USER)]


def kubeconfig_document(
    *, server: str, token: str, ca_pem: bytes, user: str, cluster: str = "berth-dev"
) -> dict[str, Any]:
    """A kubeconfig (as a dict; JSON is valid YAML) with the CA embedded, so the file stands alone."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }


def write_kubeconfig(path: Path, **document: Any) -> Path:
    """Write :func:`kubeconfig_document` to ``path`` (mode 0600: it holds a bearer token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        json.dump(kubeconfig_document(**document), handle, indent=2)
    partial.replace(path)
    return path


@dataclass(frozen=True)
class KubeConnection:
    """How to reach an apiserver: a kubeconfig file, plus what was read from it.

    What the ``kube_apiserver`` fixture returns, whether the cluster is ours or came from
    ``BERTH_KUBECONFIG``. ``token`` and ``ca_file`` are None when the kubeconfig authenticates
    otherwise (client certificates, exec plugins) or embeds its CA.
    """

    kubeconfig_path: Path
    server: str
    token: str | None = None
    ca_file: Path | None = None
    #: Set when this process started the cluster (None for BERTH_KUBECONFIG): tests that need to
    #: run components of their own (kube-scheduler) or static users check it.
    control_plane: KubeControlPlane | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> KubeConnection:
        """Read the current context's server (and token, if any) from a kubeconfig."""
        from kubernetes.client import Configuration
        from kubernetes.config import load_kube_config

        configuration = Configuration()
        load_kube_config(config_file=str(path), client_configuration=configuration, persist_config=False)
        token = (configuration.api_key or {}).get("authorization", "").removeprefix("Bearer ").strip() or None
        return cls(Path(path), configuration.host, token, None)

    def api_client(self, *, pool_size: int = 32) -> ApiClient:
        """A fresh official-client ``ApiClient`` for this cluster; close it when done.

        ``pool_size`` is urllib3's connection pool per host: as many as the threads that will share
        the client (the default 10 makes a 32-thread pool discard connections and reconnect).
        """
        from kubernetes.client import ApiClient, Configuration
        from kubernetes.config import load_kube_config

        configuration = Configuration()
        load_kube_config(
            config_file=str(self.kubeconfig_path), client_configuration=configuration, persist_config=False
        )
        configuration.connection_pool_maxsize = pool_size
        return ApiClient(configuration)


# ------------------------------------------------------------------------------------------------
# Small HTTP probes (standard library only, so readiness checks do not depend on client quirks)
# ------------------------------------------------------------------------------------------------


def _http_get(
    url: str, *, timeout: float, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _unverified_localhost_context() -> ssl.SSLContext:
    """TLS without verification, for probing our own self-signed components on 127.0.0.1 only."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def generate_rsa_key(path: Path) -> None:
    """An RSA-2048 private key in PEM, with openssl (the `cryptography` package is not a dependency)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise DevStackError(f"openssl not found. {OPENSSL_HINT}")
    procs.run_checked([openssl, "genrsa", "-out", str(path), "2048"], what="generate an RSA key", hint=OPENSSL_HINT)
    path.chmod(0o600)


# ------------------------------------------------------------------------------------------------
# The control plane
# ------------------------------------------------------------------------------------------------


class KubeControlPlane:
    """etcd 3.6 and kube-apiserver 1.34 on free ports of 127.0.0.1.

    Contract (the same as :class:`~berth_dev.devstack.kafka.KafkaProcess`):

    * :meth:`start` returns once ``/readyz`` answers ok and the official Python client, using
      :attr:`kubeconfig_path`, lists namespaces including ``default``; otherwise it raises
      :class:`DevStackError` (with the tails of both logs) and leaves nothing behind.
    * ``detached=False``: both processes die with this Python process, whatever the cause of death.
    * ``detached=True``: they outlive it (``berth dev up``); keep :meth:`to_state` and later call
      ``KubeControlPlane.from_state(...).stop()``.
    * :meth:`stop` is idempotent: SIGTERM to the apiserver, then etcd (SIGKILL after
      ``stop_grace`` seconds each), then the temporary directory is removed.

    Building the binaries on first use takes many minutes (:data:`gobuild.COLD_BUILD_NOTE`); call
    :func:`~berth_dev.devstack.gobuild.ensure_kubernetes_binaries` up front to control when.
    """

    def __init__(
        self,
        *,
        users: Sequence[KubeUser] | None = None,
        extra_apiserver_args: Sequence[str] = (),
        binaries: KubeBinaries | None = None,
        startup_timeout: float = 180.0,
        stop_grace: float = 20.0,
        detached: bool = False,
    ) -> None:
        self.users: dict[str, KubeUser] = {
            user.name: user for user in (users if users is not None else default_users())
        }
        if not any("system:masters" in user.groups for user in self.users.values()):
            raise DevStackError("KubeControlPlane needs one user in system:masters (the admin the kubeconfig uses)")
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.binaries = binaries
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.detached = detached
        self.data_dir: Path | None = None
        self.etcd_port: int | None = None
        self.etcd_peer_port: int | None = None
        self.secure_port: int | None = None
        self.etcd_pid: int | None = None
        self.apiserver_pid: int | None = None
        self._etcd_popen: subprocess.Popen[bytes] | None = None
        self._apiserver_popen: subprocess.Popen[bytes] | None = None

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def admin(self) -> KubeUser:
        return next(user for user in self.users.values() if "system:masters" in user.groups)

    @property
    def token(self) -> str:
        """The admin's bearer token (``system:masters``)."""
        return self.admin.token

    @property
    def server(self) -> str:
        """``https://127.0.0.1:<port>``."""
        if self.secure_port is None:
            raise DevStackError("the control plane is not started: call start() first")
        return f"https://127.0.0.1:{self.secure_port}"

    @property
    def etcd_url(self) -> str:
        if self.etcd_port is None:
            raise DevStackError("the control plane is not started: call start() first")
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def cert_dir(self) -> Path | None:
        return self.data_dir / "certs" if self.data_dir else None

    @property
    def ca_file(self) -> Path:
        """PEM bundle the apiserver's self-signed serving certificate verifies against.

        kube-apiserver writes ``apiserver.crt`` as the serving certificate followed by the
        ``localhost-ca`` that signed it; as a CA bundle the file trusts exactly that CA.
        """
        if self.cert_dir is None:
            raise DevStackError("the control plane is not started: call start() first")
        return self.cert_dir / "apiserver.crt"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (written once the apiserver serves; CA embedded)."""
        if self.data_dir is None:
            raise DevStackError("the control plane is not started: call start() first")
        return self.data_dir / "kubeconfig"

    @property
    def etcd_log_path(self) -> Path | None:
        return self.data_dir / "etcd.log" if self.data_dir else None

    @property
    def apiserver_log_path(self) -> Path | None:
        return self.data_dir / "kube-apiserver.log" if self.data_dir else None

    def connection(self) -> KubeConnection:
        return KubeConnection(self.kubeconfig_path, self.server, self.token, self.ca_file, self)

    def kubeconfig_for(self, user: str, path: Path | None = None) -> Path:
        """Write a kubeconfig for static user ``user`` (default path: ``<data dir>/<user>.kubeconfig``)."""
        if user not in self.users:
            raise DevStackError(f"no static user {user!r}; pass users=[KubeUser({user!r}, ...)] to KubeControlPlane")
        target = path or self.kubeconfig_path.with_name(f"{user.replace(':', '_')}.kubeconfig")
        return write_kubeconfig(
            target, server=self.server, token=self.users[user].token, ca_pem=self.ca_file.read_bytes(), user=user
        )

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | None = None, *, expiration_seconds: int = 24 * 3600
    ) -> Path:
        """Create ServiceAccount ``namespace/name`` if missing, mint a token for it (TokenRequest) and
        write a kubeconfig using it. The account has no permissions until RBAC grants some."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        with self.connection().api_client() as api:
            core = CoreV1Api(api)
            try:
                core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
            request = {"spec": {"audiences": [SERVICE_ACCOUNT_ISSUER], "expirationSeconds": expiration_seconds}}
            token = core.create_namespaced_service_account_token(name, namespace, request).status.token
        target = path or self.kubeconfig_path.with_name(f"sa-{namespace}-{name}.kubeconfig")
        return write_kubeconfig(
            target,
            server=self.server,
            token=token,
            ca_pem=self.ca_file.read_bytes(),
            user=f"system:serviceaccount:{namespace}:{name}",
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> KubeControlPlane:
        """Launch etcd and the apiserver and wait until the apiserver answers; see the class contract."""
        self.launch()
        self.wait_until_ready()
        return self

    def launch(self) -> None:
        """Start etcd (waiting for its /health, ~1 s) and spawn the apiserver without waiting for it.

        Split from :meth:`start` so :class:`~berth_dev.devstack.stack.DevStack` can boot other services
        while the apiserver initialises. On failure everything created so far is removed.
        """
        if self.apiserver_pid is not None or self.etcd_pid is not None:
            raise DevStackError(f"this control plane is already running (apiserver pid {self.apiserver_pid})")
        binaries = self.binaries or ensure_kubernetes_binaries()
        self.binaries = binaries
        procs.sweep_stale_dirs()
        self.data_dir = procs.make_temp_dir("kube")
        try:
            self._launch_etcd(binaries.etcd)
            self._wait_for_etcd()
            self._launch_apiserver(binaries.kube_apiserver)
        except BaseException:
            self.stop()
            raise
        if not self.detached:
            procs.register_for_exit(self)

    def _launch_etcd(self, etcd: Path) -> None:
        assert self.data_dir is not None
        self.etcd_port, self.etcd_peer_port = procs.free_ports(2)
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        self._etcd_popen = procs.spawn(
            [
                str(etcd),
                "--name=berth",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=berth={peer}",
                "--initial-cluster-state=new",
                # A throwaway store: skip fsync (as envtest does) and keep the log to warnings.
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--logger=zap",
                "--log-outputs=stderr",
            ],
            log_path=self.data_dir / "etcd.log",
            cwd=self.data_dir,
            detached=self.detached,
        )
        self.etcd_pid = self._etcd_popen.pid
        procs.write_owner(self.data_dir, owner_pid=None if self.detached else os.getpid(), service_pid=self.etcd_pid)

    def _wait_for_etcd(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            if not self._etcd_alive():
                raise DevStackError(self._failure("etcd exited during startup"))
            try:
                status, body = _http_get(f"{self.etcd_url}/health", timeout=2.0)
                if status == 200 and json.loads(body).get("health") == "true":
                    return
                last = f"HTTP {status} {body.strip()}"
            except (OSError, ValueError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise DevStackError(self._failure(f"etcd was not healthy within {timeout:.0f} s ({last})"))
            time.sleep(0.1)  # poll interval

    def apiserver_args(self) -> list[str]:
        """The apiserver's flags (envtest's set plus the token file; see DESIGN.md §6)."""
        assert self.data_dir is not None and self.cert_dir is not None
        sa_key = self.data_dir / "service-account.key"
        return [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.secure_port}",
            f"--cert-dir={self.cert_dir}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={self.data_dir / 'tokens.csv'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            *self.extra_apiserver_args,
        ]

    def _launch_apiserver(self, apiserver: Path) -> None:
        assert self.data_dir is not None
        (self.secure_port,) = procs.free_ports(1)
        self.cert_dir.mkdir(mode=0o700)  # type: ignore[union-attr]  # set in __init__ when TLS is on
        generate_rsa_key(self.data_dir / "service-account.key")
        tokens = self.data_dir / "tokens.csv"
        with open(os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.writelines(user.csv_line() for user in self.users.values())
        self._spawn_apiserver(apiserver)

    def _spawn_apiserver(self, apiserver: Path) -> None:
        assert self.data_dir is not None
        self._apiserver_popen = procs.spawn(
            [str(apiserver), *self.apiserver_args()],
            log_path=self.data_dir / "kube-apiserver.log",
            cwd=self.data_dir,
            detached=self.detached,
        )
        self.apiserver_pid = self._apiserver_popen.pid
        procs.write_owner(
            self.data_dir, owner_pid=None if self.detached else os.getpid(), service_pid=self.apiserver_pid
        )

    def restart_apiserver(self, *, down_s: float = 0.0, kill: bool = False) -> None:
        """Restart kube-apiserver as an upgrade or a crash would: stop it (SIGTERM, or SIGKILL with
        ``kill``), stay down ``down_s`` seconds, start it again on the same port, certificates and
        etcd (so every object and resourceVersion is kept), and return once it is ready again.
        Clients see their watches end and their requests refused while it is down."""
        self.stop_apiserver(kill=kill)
        if down_s > 0:
            time.sleep(down_s)
        self.start_apiserver()

    def stop_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver alone (SIGTERM, or SIGKILL with ``kill``); etcd keeps running.
        :meth:`start_apiserver` brings it back."""
        if self.apiserver_pid is None or self.data_dir is None:
            raise DevStackError("kube-apiserver is not running")
        procs.terminate(
            self.apiserver_pid,
            popen=self._apiserver_popen,
            cmdline_contains=self._marker(),
            grace=self.stop_grace,
            first_signal=signal.SIGKILL if kill else signal.SIGTERM,
        )
        self.apiserver_pid = None
        self._apiserver_popen = None

    def start_apiserver(self) -> None:
        """Start a kube-apiserver stopped by :meth:`stop_apiserver` again, on the same port,
        certificates and etcd; return once it is ready."""
        if self.apiserver_pid is not None:
            raise DevStackError(f"kube-apiserver is still running (pid {self.apiserver_pid})")
        if self.data_dir is None or self.binaries is None:
            raise DevStackError("the control plane was never started: call start() first")
        self._spawn_apiserver(self.binaries.kube_apiserver)
        self.wait_until_ready()

    def wait_until_ready(self) -> None:
        """Block until ``/readyz`` is ok and the Python client lists namespaces (``default`` among them).

        Writes the admin kubeconfig on the way (as soon as the serving certificate exists).
        Raises :class:`DevStackError` (after stopping everything) if a process exits or
        ``startup_timeout`` passes first.
        """
        if self.apiserver_pid is None:
            raise DevStackError("the control plane was not launched: call launch() or start()")
        deadline = time.monotonic() + self.startup_timeout
        last = "no answer yet"
        try:
            while True:
                if not self._etcd_alive():
                    raise DevStackError(self._failure("etcd exited while the apiserver started"))
                if not self._apiserver_alive():
                    raise DevStackError(self._failure("kube-apiserver exited during startup"))
                ready, last = self._probe(timeout=min(5.0, max(1.0, deadline - time.monotonic())))
                if ready:
                    return
                if time.monotonic() >= deadline:
                    raise DevStackError(
                        self._failure(
                            f"kube-apiserver was not ready within {self.startup_timeout:.0f} s (last: {last})"
                        )
                    )
                time.sleep(0.25)  # poll interval between probes
        except BaseException:
            self.stop()
            raise

    def _probe(self, *, timeout: float) -> tuple[bool, str]:
        """One readiness attempt: (ready, what was seen).

        The kubeconfig is written after the first TLS handshake verified against :attr:`ca_file`
        succeeds, which proves the apiserver finished writing that file.
        """
        if not self.ca_file.exists():
            return False, "no serving certificate yet"
        try:
            context = ssl.create_default_context(cafile=str(self.ca_file))
            status, body = _http_get(f"{self.server}/readyz", timeout=timeout, token=self.token, context=context)
        except (OSError, ssl.SSLError) as exc:
            return False, f"/readyz: {exc}"
        if not self.kubeconfig_path.exists():
            write_kubeconfig(
                self.kubeconfig_path,
                server=self.server,
                token=self.token,
                ca_pem=self.ca_file.read_bytes(),
                user=self.admin.name,
            )
        if status != 200:
            return False, f"/readyz: HTTP {status} {body.strip()[-300:]}"
        return self._client_lists_default_namespace(timeout)

    def _client_lists_default_namespace(self, timeout: float) -> tuple[bool, str]:
        from kubernetes.client import CoreV1Api

        try:
            with self.connection().api_client(pool_size=1) as api:
                names = [ns.metadata.name for ns in CoreV1Api(api).list_namespace(_request_timeout=timeout).items]
        except Exception as exc:
            return False, f"list namespaces: {type(exc).__name__}: {exc}"
        return ("default" in names), f"namespaces {names}"

    def is_answering(self, timeout: float = 5.0) -> bool:
        """True if the apiserver is ready and the client can list namespaces now."""
        if self.secure_port is None or self.data_dir is None or not self.kubeconfig_path.exists():
            return False
        return self._probe(timeout=timeout)[0]

    def _failure(self, headline: str) -> str:
        parts = [f"{headline} (apiserver {self.secure_port and self.server}, etcd {self.etcd_port and self.etcd_url})."]
        for path in (self.etcd_log_path, self.apiserver_log_path):
            if path is not None and path.exists():
                parts.append(f"--- last lines of {path} ---\n{procs.tail_file(path, 25)}")
        if any("address already in use" in part.lower() for part in parts):
            parts.append("Another program took one of the ports chosen; starting again picks new ones.")
        return "\n".join(parts)

    def _marker(self) -> str:
        return str(self.data_dir)

    def _etcd_alive(self) -> bool:
        if self.etcd_pid is None:
            return False
        if self._etcd_popen is not None:
            return self._etcd_popen.poll() is None
        return procs.is_running(self.etcd_pid, cmdline_contains=self._marker())

    def _apiserver_alive(self) -> bool:
        if self.apiserver_pid is None:
            return False
        if self._apiserver_popen is not None:
            return self._apiserver_popen.poll() is None
        return procs.is_running(self.apiserver_pid, cmdline_contains=self._marker())

    def is_alive(self) -> bool:
        """True while both etcd and the apiserver run (also for handles read from a state file)."""
        return self._etcd_alive() and self._apiserver_alive()

    def stop(self) -> None:
        """Stop the apiserver, then etcd, and delete the directory. Safe to call any time, repeatedly."""
        procs.unregister_for_exit(self)
        marker = self._marker()
        try:
            if self.apiserver_pid is not None:
                procs.terminate(
                    self.apiserver_pid, popen=self._apiserver_popen, cmdline_contains=marker, grace=self.stop_grace
                )
        finally:
            if self.etcd_pid is not None:
                procs.terminate(self.etcd_pid, popen=self._etcd_popen, cmdline_contains=marker, grace=self.stop_grace)
        self.apiserver_pid = self.etcd_pid = None
        self._apiserver_popen = self._etcd_popen = None
        if self.data_dir is not None:
            procs.remove_dir(self.data_dir)
            self.data_dir = None

    # -- detached mode --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """What ``berth dev up`` records so another process can find and stop this control plane."""
        return {
            "kubernetes_version": self.binaries.kubernetes_version if self.binaries else None,
            "etcd_version": self.binaries.etcd_version if self.binaries else None,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "etcd_pid": self.etcd_pid,
            "etcd_port": self.etcd_port,
            "etcd_peer_port": self.etcd_peer_port,
            "apiserver_pid": self.apiserver_pid,
            "secure_port": self.secure_port,
            "server": self.server if self.secure_port else None,
            "kubeconfig": str(self.kubeconfig_path) if self.data_dir else None,
            "users": [{"name": u.name, "groups": list(u.groups), "token": u.token} for u in self.users.values()],
            "log": str(self.apiserver_log_path) if self.apiserver_log_path else None,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> KubeControlPlane:
        """A handle on a control plane another process started (not our child)."""
        users = [KubeUser(u["name"], tuple(u.get("groups", ())), u["token"]) for u in state.get("users") or []]
        plane = cls(users=users or None, detached=True)
        plane.data_dir = Path(state["data_dir"]) if state.get("data_dir") else None
        plane.etcd_pid = state.get("etcd_pid")
        plane.etcd_port = state.get("etcd_port")
        plane.etcd_peer_port = state.get("etcd_peer_port")
        plane.apiserver_pid = state.get("apiserver_pid")
        plane.secure_port = state.get("secure_port")
        return plane

    def __enter__(self) -> KubeControlPlane:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"KubeControlPlane(apiserver_pid={self.apiserver_pid}, etcd_pid={self.etcd_pid}, "
            f"port={self.secure_port}, data_dir={self.data_dir})"
        )


# ------------------------------------------------------------------------------------------------
# kube-scheduler (for head-to-head comparisons; Berth itself does not need it)
# ------------------------------------------------------------------------------------------------


class KubeSchedulerProcess:
    """The stock kube-scheduler 1.34 against a control plane (or any kubeconfig).

    With a :class:`KubeControlPlane` it authenticates as the static user ``system:kube-scheduler``,
    which the bootstrap RBAC policy grants exactly kube-scheduler's permissions (as in a real
    cluster). Leader election is off. Ready when its ``/readyz`` (HTTPS, self-signed, on
    :attr:`secure_port`, where ``/metrics`` also lives) answers ok. Lifetime rules as everywhere
    in this package; ``extra_args`` e.g. ``["--config=...", "--v=2"]``.
    """

    def __init__(
        self,
        control_plane: KubeControlPlane | None = None,
        *,
        kubeconfig: Path | None = None,
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        stop_grace: float = 10.0,
    ) -> None:
        if (control_plane is None) == (kubeconfig is None):
            raise DevStackError("give KubeSchedulerProcess a control plane or a kubeconfig (one of them)")
        self.control_plane = control_plane
        self.kubeconfig = kubeconfig
        self.binary = binary
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.data_dir: Path | None = None
        self.secure_port: int | None = None
        self.pid: int | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path | None:
        return self.data_dir / "kube-scheduler.log" if self.data_dir else None

    def start(self) -> KubeSchedulerProcess:
        if self.pid is not None:
            raise DevStackError(f"this kube-scheduler is already running (pid {self.pid})")
        binary = self.binary or ensure_kubernetes_binaries().kube_scheduler
        procs.sweep_stale_dirs()
        self.data_dir = procs.make_temp_dir("kube-scheduler")
        try:
            if self.control_plane is not None:
                kubeconfig = self.control_plane.kubeconfig_for(SCHEDULER_USER, self.data_dir / "kubeconfig")
            else:
                kubeconfig = self.kubeconfig  # type: ignore[assignment]  # written by start() before this runs
            (self.secure_port,) = procs.free_ports(1)
            self._popen = procs.spawn(
                [
                    str(binary),
                    f"--kubeconfig={kubeconfig}",
                    f"--authentication-kubeconfig={kubeconfig}",
                    f"--authorization-kubeconfig={kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.secure_port}",
                    f"--cert-dir={self.data_dir / 'certs'}",
                    *self.extra_args,
                ],
                log_path=self.data_dir / "kube-scheduler.log",
                cwd=self.data_dir,
            )
            self.pid = self._popen.pid
            procs.write_owner(self.data_dir, owner_pid=os.getpid(), service_pid=self.pid)
            procs.register_for_exit(self)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last = ""
        while True:
            if self._popen is not None and self._popen.poll() is not None:
                raise DevStackError(self._failure("kube-scheduler exited during startup"))
            try:
                status, body = _http_get(
                    f"https://127.0.0.1:{self.secure_port}/readyz", timeout=3.0, context=_unverified_localhost_context()
                )
                if status == 200:
                    return
                last = f"HTTP {status} {body.strip()[-200:]}"
            except (OSError, ssl.SSLError) as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise DevStackError(
                    self._failure(f"kube-scheduler was not ready within {self.startup_timeout:.0f} s ({last})")
                )
            time.sleep(0.25)

    def metrics(self, timeout: float = 5.0) -> str:
        """The Prometheus text from ``/metrics`` (read with the admin token when we own the cluster)."""
        token = self.control_plane.token if self.control_plane else None
        status, body = _http_get(
            f"https://127.0.0.1:{self.secure_port}/metrics",
            timeout=timeout,
            token=token,
            context=_unverified_localhost_context(),
        )
        if status != 200:
            raise DevStackError(f"kube-scheduler /metrics answered HTTP {status}: {body[:300]}")
        return body

    def _failure(self, headline: str) -> str:
        log = procs.tail_file(self.log_path, 30) if self.log_path else "(no log)"
        return f"{headline} (port {self.secure_port}).\n--- last lines of {self.log_path} ---\n{log}"

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def stop(self) -> None:
        procs.unregister_for_exit(self)
        if self.pid is not None:
            procs.terminate(
                self.pid,
                popen=self._popen,
                cmdline_contains=str(self.data_dir),
                grace=self.stop_grace,
                first_signal=signal.SIGTERM,
            )
        self.pid = None
        self._popen = None
        if self.data_dir is not None:
            procs.remove_dir(self.data_dir)
            self.data_dir = None

    def __enter__(self) -> KubeSchedulerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = [
    "ADMIN_USER",
    "SCHEDULER_USER",
    "KubeConnection",
    "KubeControlPlane",
    "KubeSchedulerProcess",
    "KubeUser",
    "default_users",
    "kubeconfig_document",
    "write_kubeconfig",
]
