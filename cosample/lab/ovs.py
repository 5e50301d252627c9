"""A private Open vSwitch: its own ovsdb-server and ovs-vswitchd in a directory of ours.

Two flavours, as checked on this project's machines (docs/ovs-facts.md):
- ``dummy=True``: ``--enable-dummy=override --disable-system``; no root, no kernel features,
  for OVSDB-level tests of the agents;
- ``dummy=False``: the userspace (netdev) datapath, real packets through veth ports; needs root.
  Only one such instance fits in a network namespace (each creates a tap named ``ovs-netdev``),
  so ``namespace=`` runs ovs-vswitchd inside a namespace of ours; its ports then live there.

The instance never touches the system's OVS: its sockets, database and logs live in ``directory``,
and ``stop`` kills only the PIDs from its own pidfiles.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

from cosample.dataplane.run import CommandError, require, run

SCHEMA_CANDIDATES = (
    Path("/usr/share/openvswitch/vswitch.ovsschema"),
    Path("/usr/local/share/openvswitch/vswitch.ovsschema"),
)


def ovs_available() -> str | None:
    """None when the OVS binaries and schema are installed, else the reason they are not."""
    for program in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovsdb-tool", "ovs-appctl"):
        try:
            require(program, "openvswitch-switch")
        except CommandError as exc:
            return str(exc)
    if not any(path.exists() for path in SCHEMA_CANDIDATES):
        return "OVS schema vswitch.ovsschema not found"
    return None


class OvsInstance:
    """A private OVS; use as a context manager, or call ``start``/``stop``."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        dummy: bool = True,
        timeout: float = 10.0,
        namespace: str | None = None,
    ) -> None:
        self.directory = Path(directory or tempfile.mkdtemp(prefix="cosample-ovs-"))
        self.dummy = dummy
        self.timeout = timeout
        self.namespace = namespace

    # paths -------------------------------------------------------------------------------
    @property
    def db_socket(self) -> Path:
        return self.directory / "db.sock"

    @property
    def remote(self) -> str:
        """The OVSDB remote to hand to ``ovs-vsctl --db`` or an agent's ``--ovsdb``."""
        return f"unix:{self.db_socket}"

    def _path(self, name: str) -> Path:
        return self.directory / name

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> "OvsInstance":
        reason = ovs_available()
        if reason:
            raise CommandError(reason)
        self.directory.mkdir(parents=True, exist_ok=True)
        database = self._path("conf.db")
        if not database.exists():
            schema = next(path for path in SCHEMA_CANDIDATES if path.exists())
            run(["ovsdb-tool", "create", database, schema], timeout=self.timeout)
        try:
            self.start_ovsdb()
            self.vsctl("--no-wait", "init")
            self.start_vswitchd()
        except BaseException:  # a failed start leaves no daemon behind (``with`` never began)
            self.stop()
            raise
        return self

    def start_ovsdb(self) -> None:
        run(
            [
                "ovsdb-server",
                self._path("conf.db"),
                f"--remote=punix:{self.db_socket}",
                f"--pidfile={self._path('ovsdb-server.pid')}",
                f"--unixctl={self._path('ovsdb-server.ctl')}",
                f"--log-file={self._path('ovsdb-server.log')}",
                "--detach",
            ],
            timeout=self.timeout,
            env=self._env(),
        )

    def start_vswitchd(self) -> None:
        argv = [
            "ovs-vswitchd",
            self.remote,
            f"--pidfile={self._path('ovs-vswitchd.pid')}",
            f"--unixctl={self._path('ovs-vswitchd.ctl')}",
            f"--log-file={self._path('ovs-vswitchd.log')}",
            "--detach",
            "--disable-system",
        ]
        if self.dummy:
            argv.insert(2, "--enable-dummy=override")
        if self.namespace:  # the userspace datapath's taps (ovs-netdev, one per bridge) live there
            argv = ["ip", "netns", "exec", self.namespace, *argv]
        run(argv, timeout=self.timeout, env=self._env())

    def stop_ovsdb(self) -> None:
        self._kill("ovsdb-server.pid")

    def stop_vswitchd(self) -> None:
        self._kill("ovs-vswitchd.pid")

    def stop(self) -> None:
        """Delete this instance's bridges, then stop both daemons; safe to call twice.

        Bridges go first because the userspace datapath leaves a tap device per bridge in the
        root namespace when ovs-vswitchd dies with the bridge still configured.
        """
        if self.db_socket.exists():
            try:
                for bridge in self.vsctl("list-br").split():
                    self.vsctl("--if-exists", "del-br", bridge)
            except CommandError:
                pass  # daemons already gone or wedged: stopping them is what matters
        self.stop_vswitchd()
        self.stop_ovsdb()

    def __enter__(self) -> "OvsInstance":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # commands ----------------------------------------------------------------------------
    def vsctl(self, *args: str, timeout: float | None = None) -> str:
        """``ovs-vsctl`` against this instance; returns stdout."""
        return run(
            ["ovs-vsctl", f"--db={self.remote}", f"--timeout={int(self.timeout)}", *args],
            timeout=timeout or self.timeout + 2,
        ).stdout

    def wait_for_ports(self, *ports: str, timeout: float = 10.0) -> None:
        """Block until ovs-vswitchd has given every port an OpenFlow port number."""
        deadline = time.monotonic() + timeout
        pending = list(ports)
        while pending:
            numbers = [
                self.vsctl("--if-exists", "get", "Interface", port, "ofport").strip()
                for port in pending
            ]
            pending = [
                port
                for port, number in zip(pending, numbers)
                if not number.lstrip("-").isdigit() or int(number) <= 0
            ]
            if pending and time.monotonic() > deadline:
                raise CommandError(
                    f"ovs-vswitchd did not attach {', '.join(pending)} within "
                    f"{timeout:g} s; see {self._path('ovs-vswitchd.log')}"
                )
            if pending:
                time.sleep(0.1)

    def appctl(self, *args: str) -> str:
        """``ovs-appctl`` to this instance's ovs-vswitchd; returns stdout."""
        return run(
            ["ovs-appctl", "-t", self._path("ovs-vswitchd.ctl"), *args], timeout=self.timeout
        ).stdout

    def ofctl(self, *args: str) -> str:
        """``ovs-ofctl`` to a bridge of this instance (its management socket is in our rundir)."""
        return run(["ovs-ofctl", *args], timeout=self.timeout, env=self._env()).stdout

    # helpers -----------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            OVS_RUNDIR=str(self.directory),
            OVS_LOGDIR=str(self.directory),
            OVS_DBDIR=str(self.directory),
        )
        return env

    def _kill(self, pidfile: str) -> None:
        path = self._path(pidfile)
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            return
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
