"""Build kube-apiserver, kube-scheduler and etcd from the Go module proxy, cached by version.

Layout (``BERTH_CACHE_DIR`` overrides the root, default ``<repo>/.cache``)::

    .cache/kubernetes-v1.34.10/module/go.mod      generated wrapper module (kept: go.sum, reruns)
    .cache/kubernetes-v1.34.10/bin/kube-apiserver
    .cache/kubernetes-v1.34.10/bin/kube-scheduler
    .cache/kubernetes-v1.34.10/COMPLETE           written last; without it the build runs again
    .cache/etcd-v3.6.16/{module,bin/etcd,COMPLETE}

Why a wrapper module: ``k8s.io/kubernetes`` requires its staging modules (``k8s.io/api``,
``k8s.io/client-go``, ...) at ``v0.0.0`` and points them at ``./staging/...`` with ``replace``
directives, which only apply inside the kubernetes repository. A module that requires
``k8s.io/kubernetes`` must replace each of them with the published ``v0.<minor>.<patch>`` itself.
The list is read from kubernetes' own go.mod (downloaded by ``go mod download``), so it follows
the version.

Go's module cache and build cache stay where Go keeps them (``go env GOMODCACHE GOCACHE``), so a
rebuild after ``rm -rf .cache`` recompiles little. A cold build takes ~10 minutes on a 2-core
machine (see :data:`COLD_BUILD_NOTE`); a warm no-op check is instant (the COMPLETE marker).

``BERTH_KUBE_BIN_DIR`` points at a directory that already holds ``kube-apiserver``,
``kube-scheduler`` and ``etcd`` (e.g. envtest's assets plus a scheduler): nothing is built then.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from berth_dev.devstack.cache import COMPLETE_MARKER, cache_dir
from berth_dev.devstack.procs import DevStackError

#: The newest v1.34 patch whose go.mod the public checksum database (reached through the module
#: proxy) can verify. v1.34.11 and v1.34.12 are on the proxy but sum.golang.org returned 404 for
#: them when this was pinned, and Go refuses unverifiable modules (rightly; we do not turn
#: GONOSUMDB on for Kubernetes). Move the pin with: ``python -m berth_dev.devstack build-kubernetes``
#: after editing these two constants.
KUBERNETES_VERSION = "v1.34.10"
ETCD_VERSION = "v3.6.16"

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KUBERNETES_COMMANDS = ("kube-apiserver", "kube-scheduler")

#: Shown before a build starts. Measured on a shared 2-core machine with empty Go caches:
#: 557 s (etcd 123 s, 580 packages; kube-apiserver + kube-scheduler 424 s, 1,769 packages), leaving
#: ~0.8 GB in GOMODCACHE and ~2.5 GB in GOCACHE. With Go's caches warm a full rebuild (``--force``
#: or an emptied .cache/) takes ~10 s; with the COMPLETE markers present, nothing runs.
COLD_BUILD_NOTE = (
    "The first build downloads ~0.8 GB of Go modules and compiles ~2,300 packages: about 10 minutes on "
    "a 2-core machine, more when it is busy (later builds reuse Go's caches and take seconds)."
)

ENV_BIN_DIR = "BERTH_KUBE_BIN_DIR"

GO_HINT = (
    "Install Go 1.26 (https://go.dev/dl, or your distribution's golang package) and make sure the Go "
    "module proxy is reachable (go env GOPROXY); or set BERTH_KUBE_BIN_DIR to a directory holding "
    "kube-apiserver, kube-scheduler and etcd."
)

console = Console(stderr=True)


@dataclass(frozen=True)
class KubeBinaries:
    """Paths of the three control-plane programs."""

    kube_apiserver: Path
    kube_scheduler: Path
    etcd: Path
    kubernetes_version: str = KUBERNETES_VERSION
    etcd_version: str = ETCD_VERSION


def kubernetes_home(version: str = KUBERNETES_VERSION) -> Path:
    return cache_dir() / f"kubernetes-{version}"


def etcd_home(version: str = ETCD_VERSION) -> Path:
    return cache_dir() / f"etcd-{version}"


def staging_version(kubernetes_version: str) -> str:
    """``v1.34.10`` -> ``v0.34.10``: the published tag of the staging modules for that release."""
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if not match:
        raise DevStackError(f"not a Kubernetes release version: {kubernetes_version!r} (want v1.<minor>.<patch>)")
    return f"v0.{match.group(1)}.{match.group(2)}"


def _bin_dir_override() -> KubeBinaries | None:
    override = os.environ.get(ENV_BIN_DIR, "").strip()
    if not override:
        return None
    directory = Path(override).expanduser()
    found = {name: directory / name for name in ("kube-apiserver", "kube-scheduler", "etcd")}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise DevStackError(f"{ENV_BIN_DIR}={directory} lacks executable {', '.join(missing)}")
    return KubeBinaries(
        found["kube-apiserver"],
        found["kube-scheduler"],
        found["etcd"],
        kubernetes_version="(from $BERTH_KUBE_BIN_DIR)",
        etcd_version="(from $BERTH_KUBE_BIN_DIR)",
    )


def _cached_binaries(kubernetes_version: str, etcd_version: str) -> KubeBinaries:
    kube_bin = kubernetes_home(kubernetes_version) / "bin"
    return KubeBinaries(
        kube_bin / "kube-apiserver",
        kube_bin / "kube-scheduler",
        etcd_home(etcd_version) / "bin" / "etcd",
        kubernetes_version,
        etcd_version,
    )


def kubernetes_binaries_present(kubernetes_version: str = KUBERNETES_VERSION, etcd_version: str = ETCD_VERSION) -> bool:
    """True when the binaries are available without building (cached builds or the env override)."""
    if os.environ.get(ENV_BIN_DIR, "").strip():
        try:
            return _bin_dir_override() is not None
        except DevStackError:
            return False
    return (kubernetes_home(kubernetes_version) / COMPLETE_MARKER).exists() and (
        etcd_home(etcd_version) / COMPLETE_MARKER
    ).exists()


def ensure_kubernetes_binaries(
    kubernetes_version: str = KUBERNETES_VERSION,
    etcd_version: str = ETCD_VERSION,
    *,
    quiet: bool = False,
    force: bool = False,
) -> KubeBinaries:
    """Return the paths of kube-apiserver, kube-scheduler and etcd, building them first if needed.

    Safe to call every time: with both COMPLETE markers present it returns at once. Concurrent
    callers (parallel test sessions) wait for one build. ``force`` rebuilds even when cached
    (Go's own caches still make that fast). Progress goes to stderr unless ``quiet``. Raises
    :class:`DevStackError` with Go's output when a build fails.
    """
    override = _bin_dir_override()
    if override is not None:
        return override
    if not force and kubernetes_binaries_present(kubernetes_version, etcd_version):
        return _cached_binaries(kubernetes_version, etcd_version)
    go = shutil.which("go")
    if go is None:
        raise DevStackError(f"go not found: kube-apiserver, kube-scheduler and etcd are built from source. {GO_HINT}")
    if not quiet:
        console.print(
            f"[yellow]Building the Kubernetes control plane from the Go module proxy.[/yellow] {COLD_BUILD_NOTE}"
        )
    started = time.monotonic()
    _locked_build(
        etcd_home(etcd_version),
        force=force,
        quiet=quiet,
        build=lambda home: _build_etcd(go, etcd_version, home, quiet=quiet),
    )
    _locked_build(
        kubernetes_home(kubernetes_version),
        force=force,
        quiet=quiet,
        build=lambda home: _build_kubernetes(go, kubernetes_version, home, quiet=quiet),
    )
    if not quiet:
        console.print(f"[green]✓[/green] control-plane binaries ready ({time.monotonic() - started:.0f} s)")
    return _cached_binaries(kubernetes_version, etcd_version)


def _locked_build(home: Path, *, force: bool, quiet: bool, build: object) -> None:
    """Run ``build(home)`` under a file lock unless another process finished it meanwhile."""
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not quiet:
                console.print(f"Waiting for another process building {home}…")
            fcntl.flock(lock, fcntl.LOCK_EX)
            force = False  # the other process just built it
        if (home / COMPLETE_MARKER).exists() and not force:
            return
        (home / COMPLETE_MARKER).unlink(missing_ok=True)
        build(home)  # type: ignore[operator]  # set before build runs


# ------------------------------------------------------------------------------------------------
# The wrapper modules
# ------------------------------------------------------------------------------------------------


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    # -mod=mod lets go resolve the wrapper's requirements and write go.sum; any GOFLAGS the user
    # has (e.g. -buildvcs=false) are kept.
    env["GOFLAGS"] = f"{env.get('GOFLAGS', '')} -mod=mod".strip()
    env["CGO_ENABLED"] = "0"
    return env


def _module_info(go: str, module: str, version: str, env: dict[str, str]) -> dict[str, object]:
    """``go mod download -json module@version``: downloads it and says where its go.mod is."""
    with tempfile.TemporaryDirectory(prefix="berth-gomod-") as outside_any_module:
        result = subprocess.run(
            [go, "mod", "download", "-json", f"{module}@{version}"],
            cwd=outside_any_module,
            env=env,
            capture_output=True,
            text=True,
        )
    try:
        info = json.loads(result.stdout) if result.stdout.strip() else {}
    except ValueError:
        info = {}
    if result.returncode != 0 or info.get("Error") or not info.get("GoMod"):
        detail = info.get("Error") or (result.stdout + result.stderr).strip()
        raise DevStackError(f"cannot download {module}@{version} from the Go module proxy: {detail}\n{GO_HINT}")
    return info


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The ``k8s.io/...`` modules kubernetes' go.mod requires at ``v0.0.0`` (its staging repos)."""
    return sorted(
        set(
            re.findall(
                r"^\s*(?:require\s+)?(k8s\.io/[\w.\-/]+)\s+v0\.0\.0\s*(?://.*)?$", kubernetes_go_mod, flags=re.MULTILINE
            )
        )
    )


def kubernetes_wrapper_go_mod(version: str, staging: Sequence[str], go_directive: str) -> str:
    published = staging_version(version)
    replaces = "\n".join(f"\t{module} => {module} {published}" for module in staging)
    return (
        "// Generated by berth_dev.devstack.gobuild to build kube-apiserver and kube-scheduler; do not edit.\n"
        "module berth.local/kubernetes-build\n\n"
        f"go {go_directive}\n\n"
        f"require {KUBERNETES_MODULE} {version}\n\n"
        f"replace (\n{replaces}\n)\n"
    )


def _go_directive(go_mod: str, default: str) -> str:
    match = re.search(r"^go\s+(\S+)\s*$", go_mod, flags=re.MULTILINE)
    return match.group(1) if match else default


def _version_ldflags(kubernetes_version: str, commit: str | None) -> str:
    """What Kubernetes' own build (hack/lib/version.sh) stamps, so /version reports the release."""
    major, minor = kubernetes_version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    flags = [
        "-s",
        "-w",
        f"-X {pkg}.gitVersion={kubernetes_version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    ]
    if commit:
        flags.append(f"-X {pkg}.gitCommit={commit}")
    return " ".join(flags)


def _origin_hash(info: dict[str, object]) -> str | None:
    origin = info.get("Origin")
    return origin.get("Hash") if isinstance(origin, dict) else None  # type: ignore[return-value]  # the module origin's hash is a str


def _build_kubernetes(go: str, version: str, home: Path, *, quiet: bool) -> None:
    env = _go_env(go)
    info = _module_info(go, KUBERNETES_MODULE, version, env)
    kube_go_mod = Path(str(info["GoMod"])).read_text()
    staging = staging_modules(kube_go_mod)
    if not staging:
        raise DevStackError(f"found no k8s.io/* v0.0.0 requirements in {info['GoMod']}; has the layout changed?")
    module = home / "module"
    module.mkdir(parents=True, exist_ok=True)
    (module / "go.mod").write_text(kubernetes_wrapper_go_mod(version, staging, _go_directive(kube_go_mod, "1.25.0")))
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    # One `go build` for both commands: their ~2,000 packages mostly overlap and go compiles
    # each once, in parallel. With -o <dir>/ each main package lands as <dir>/<name>.
    _run_go(
        [
            go,
            "build",
            "-trimpath",
            f"-ldflags={_version_ldflags(version, _origin_hash(info))}",
            "-o",
            f"{bin_dir}{os.sep}",
            *(f"{KUBERNETES_MODULE}/cmd/{name}" for name in KUBERNETES_COMMANDS),
        ],
        cwd=module,
        env=env,
        what=f"build kube-apiserver and kube-scheduler {version}",
        quiet=quiet,
    )
    _finish(home, [bin_dir / name for name in KUBERNETES_COMMANDS], version)


def _build_etcd(go: str, version: str, home: Path, *, quiet: bool) -> None:
    env = _go_env(go)
    info = _module_info(go, ETCD_MODULE, version, env)
    etcd_go_mod = Path(str(info["GoMod"])).read_text()
    module = home / "module"
    module.mkdir(parents=True, exist_ok=True)
    (module / "go.mod").write_text(
        "// Generated by berth_dev.devstack.gobuild to build etcd; do not edit.\n"
        "module berth.local/etcd-build\n\n"
        f"go {_go_directive(etcd_go_mod, '1.26.0')}\n\n"
        f"require {ETCD_MODULE} {version}\n"
    )
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    ldflags = "-s -w"
    if commit := _origin_hash(info):
        ldflags += f" -X go.etcd.io/etcd/api/v3/version.GitSHA={commit[:8]}"
    _run_go(
        [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(bin_dir / "etcd"), ETCD_MODULE],
        cwd=module,
        env=env,
        what=f"build etcd {version}",
        quiet=quiet,
    )
    _finish(home, [bin_dir / "etcd"], version)


def _finish(home: Path, binaries: list[Path], version: str) -> None:
    missing = [str(path) for path in binaries if not os.access(path, os.X_OK)]
    if missing:
        raise DevStackError(f"go build finished but did not produce {', '.join(missing)}")
    sizes = ", ".join(f"{path.name} {path.stat().st_size / 2**20:.0f} MiB" for path in binaries)
    (home / COMPLETE_MARKER).write_text(f"{version}: {sizes}\n")


def _run_go(argv: list[str], *, cwd: Path, env: dict[str, str], what: str, quiet: bool) -> None:
    """Run a go command, showing its latest output line and the elapsed time; raise on failure.

    ``-v`` makes go print each package as it finishes compiling, which is the only progress it
    offers; the count of packages done is shown against nothing (go does not announce a total).
    """
    argv = [argv[0], argv[1], "-v", *argv[2:]]
    tail: deque[str] = deque(maxlen=60)
    packages = 0
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert process.stdout is not None
    status = None if quiet else console.status(f"{what}: starting")
    lock = threading.Lock()
    last = ""

    def refresh() -> None:
        if status is not None:
            status.update(
                f"{escape(what)}: {time.monotonic() - started:.0f} s, {packages} packages built"
                f" [dim]{escape(last[:80])}[/dim]"
            )

    stop_ticking = threading.Event()

    def tick() -> None:  # keep the elapsed time moving while the linker works in silence
        while not stop_ticking.wait(1.0):
            with lock:
                refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    if status is not None:
        status.start()
        ticker.start()
    try:
        for line in process.stdout:
            line = line.rstrip()
            tail.append(line)
            with lock:
                if line.startswith("go: downloading"):
                    last = line
                elif line and not line.startswith(("#", "go:")):
                    packages += 1
                    last = line
                refresh()
        returncode = process.wait()
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        stop_ticking.set()
        if status is not None:
            status.stop()
    elapsed = time.monotonic() - started
    if returncode != 0:
        errors = [line for line in tail if not line.startswith("go: downloading")]
        raise DevStackError(
            f"cannot {what}: `{' '.join(argv)}` exited with {returncode} after {elapsed:.0f} s:\n"
            + "\n".join(errors[-30:])
            + f"\n{GO_HINT}"
        )
    if not quiet:
        console.print(f"[green]✓[/green] {escape(what)} ({elapsed:.0f} s, {packages} packages compiled)")


# ------------------------------------------------------------------------------------------------
# kube-scheduler's own benchmark (test/integration/scheduler_perf), as test binaries
# ------------------------------------------------------------------------------------------------

#: The scheduler_perf topics built as test binaries (``<topic>.test``): ``misc`` holds
#: SchedulingBasic, ``affinity`` the (node/pod) affinity cases.
SCHEDULER_PERF_PACKAGE = f"{KUBERNETES_MODULE}/test/integration/scheduler_perf"
SCHEDULER_PERF_TOPICS = ("misc", "affinity")

#: Shown before the test binaries are built (measured on this shared 2-core machine).
SCHEDULER_PERF_BUILD_NOTE = (
    "The first build compiles kube-scheduler's integration benchmark (scheduler_perf: an in-process "
    "kube-apiserver, the scheduler and the test framework, ~2,500 packages) from the Go module proxy: "
    "10-25 minutes on a busy 2-core machine; later runs reuse the cached test binaries."
)


@dataclass(frozen=True)
class SchedulerPerfBinaries:
    """``<topic>.test`` binaries and the source directory each must run in (its config's home)."""

    binaries: dict[str, Path]
    source_dirs: dict[str, Path]
    etcd: Path
    kubernetes_version: str = KUBERNETES_VERSION


def scheduler_perf_home(version: str = KUBERNETES_VERSION) -> Path:
    return cache_dir() / f"kube-perf-{version}"


def scheduler_perf_wrapper_go_mod(version: str, staging: Sequence[str], go_directive: str) -> str:
    """The kubernetes wrapper module under its own name (same requirement and staging replaces)."""
    return (
        kubernetes_wrapper_go_mod(version, staging, go_directive)
        .replace("to build kube-apiserver and kube-scheduler", "to build scheduler_perf test binaries")
        .replace("module berth.local/kubernetes-build", "module berth.local/kube-perf-build")
    )


def _scheduler_perf_source_dirs(version: str) -> dict[str, Path]:
    """Where the module cache holds each topic's package (performance-config.yaml, ../templates)."""
    modcache = os.environ.get("GOMODCACHE", "").strip()
    if not modcache:
        go = shutil.which("go")
        if go is not None:
            modcache = subprocess.run(
                [go, "env", "GOMODCACHE"], check=False, capture_output=True, text=True
            ).stdout.strip()
    root = Path(modcache or Path.home() / "go" / "pkg" / "mod") / f"{KUBERNETES_MODULE}@{version}"
    return {topic: root / "test" / "integration" / "scheduler_perf" / topic for topic in SCHEDULER_PERF_TOPICS}


def scheduler_perf_binaries_present(version: str = KUBERNETES_VERSION) -> bool:
    return (scheduler_perf_home(version) / COMPLETE_MARKER).exists()


def ensure_scheduler_perf_binaries(
    kubernetes_version: str = KUBERNETES_VERSION,
    etcd_version: str = ETCD_VERSION,
    *,
    quiet: bool = False,
    force: bool = False,
) -> SchedulerPerfBinaries:
    """Build (once, cached under ``.cache/kube-perf-<version>/bin``) the scheduler_perf test binaries.

    Uses the same wrapper-module recipe as kube-apiserver/kube-scheduler (staging replaces read
    from kubernetes' go.mod), then ``go test -c`` for each topic. etcd (which the integration
    framework starts itself, found through PATH) comes from :func:`ensure_kubernetes_binaries`'s
    cache. Raises :class:`DevStackError` with Go's output when the build fails.
    """
    home = scheduler_perf_home(kubernetes_version)
    etcd = etcd_home(etcd_version) / "bin" / "etcd"
    if not (etcd_home(etcd_version) / COMPLETE_MARKER).exists():
        etcd = ensure_kubernetes_binaries(kubernetes_version, etcd_version, quiet=quiet).etcd
    if force or not scheduler_perf_binaries_present(kubernetes_version):
        go = shutil.which("go")
        if go is None:
            raise DevStackError(f"go not found: scheduler_perf is built from source. {GO_HINT}")
        if not quiet:
            console.print(
                f"[yellow]Building kube-scheduler's scheduler_perf benchmark.[/yellow] {SCHEDULER_PERF_BUILD_NOTE}"
            )
        _locked_build(
            home,
            force=force,
            quiet=quiet,
            build=lambda where: _build_scheduler_perf(go, kubernetes_version, where, quiet=quiet),
        )
    bin_dir = home / "bin"
    return SchedulerPerfBinaries(
        binaries={topic: bin_dir / f"{topic}.test" for topic in SCHEDULER_PERF_TOPICS},
        source_dirs=_scheduler_perf_source_dirs(kubernetes_version),
        etcd=etcd,
        kubernetes_version=kubernetes_version,
    )


def _build_scheduler_perf(go: str, version: str, home: Path, *, quiet: bool) -> None:
    env = _go_env(go)
    info = _module_info(go, KUBERNETES_MODULE, version, env)
    kube_go_mod = Path(str(info["GoMod"])).read_text()
    staging = staging_modules(kube_go_mod)
    if not staging:
        raise DevStackError(f"found no k8s.io/* v0.0.0 requirements in {info['GoMod']}; has the layout changed?")
    module = home / "module"
    module.mkdir(parents=True, exist_ok=True)
    (module / "go.mod").write_text(
        scheduler_perf_wrapper_go_mod(version, staging, _go_directive(kube_go_mod, "1.25.0"))
    )
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    # First the shared library package with `go build -v` (the only way to see per-package
    # progress), then `go test -c` links each topic's test binary from the warm build cache.
    _run_go(
        [go, "build", "-trimpath", SCHEDULER_PERF_PACKAGE],
        cwd=module,
        env=env,
        what=f"compile scheduler_perf {version} and its dependencies",
        quiet=quiet,
    )
    _run_go(
        [
            go,
            "test",
            "-c",
            "-vet=off",
            "-trimpath",
            "-o",
            f"{bin_dir}{os.sep}",
            *(f"{SCHEDULER_PERF_PACKAGE}/{topic}" for topic in SCHEDULER_PERF_TOPICS),
        ],
        cwd=module,
        env=env,
        what=f"link the scheduler_perf test binaries {version}",
        quiet=quiet,
    )
    _finish(home, [bin_dir / f"{topic}.test" for topic in SCHEDULER_PERF_TOPICS], version)


__all__ = [
    "COLD_BUILD_NOTE",
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "SCHEDULER_PERF_TOPICS",
    "KubeBinaries",
    "SchedulerPerfBinaries",
    "ensure_kubernetes_binaries",
    "ensure_scheduler_perf_binaries",
    "etcd_home",
    "kubernetes_binaries_present",
    "kubernetes_home",
    "scheduler_perf_binaries_present",
    "scheduler_perf_home",
    "staging_modules",
    "staging_version",
]
