"""``systemctl`` and ``journalctl`` for a machine of ``tests/ops/machines.py``, where systemd is
not PID 1: each unit's ``ExecStart`` run with its environment, as systemd would start it.

What it does, of systemd, for the units the docs install (deploy/systemd/ and Debian's own):
unit files from ``/etc/systemd/system`` then ``/lib/systemd/system``, drop-ins from
``UNIT.d/*.conf``; ``EnvironmentFile=`` (``-`` prefix: optional) and ``Environment=``;
``LoadCredential=`` copied to ``/run/credentials/UNIT`` (``%d``, ``$CREDENTIALS_DIRECTORY``);
``StateDirectory=`` (``/var/lib/NAME``, with ``DynamicUser=`` a link to ``/var/lib/private/NAME``
as systemd makes it; ``StateDirectoryMode=``), ``UMask=``; specifiers ``%d``,
``%n``, ``%%``; ``$VAR`` split into words and ``${VAR}`` kept in one, as systemd expands them;
``ExecStop=`` (with ``$MAINPID``), then SIGTERM and, after 20 s, SIGKILL; a ``.socket`` with
``ListenStream=`` runs its service under ``systemd-socket-activate``. The daemon's standard
output and error go to its log (what ``journalctl -u UNIT`` prints).

What it does not: users (``User=``, ``DynamicUser=``: everything runs as root), the sandboxing
options (``tests/ops/test_systemd.py`` checks those statically), ``Restart=`` (a daemon that
exits stays down, so a test sees it), dependencies and ordering (the docs' order is followed).

Commands: ``daemon-reload``, ``enable [--now] UNIT...``, ``start``, ``stop``, ``restart``,
``kill``, ``status``, ``is-active``; ``journalctl -u UNIT [-n N] [--no-pager]``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

UNIT_DIRS = (
    Path("/etc/systemd/system"),
    Path("/lib/systemd/system"),
    Path("/usr/lib/systemd/system"),
)
STATE = Path("/run/unit-runner")  # PIDs and logs (a folder of the machine's directory)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 20.0


class UnitError(Exception):
    pass


def unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def read_unit(name: str) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values...]}}`` of the unit and its drop-ins; an empty assignment
    resets a key's list, as in systemd."""
    for directory in UNIT_DIRS:
        path = directory / name
        if path.exists():
            break
    else:
        raise UnitError(f"Unit {name} not found.")
    sections: dict[str, dict[str, list[str]]] = {}
    files = [path] + sorted((Path("/etc/systemd/system") / f"{name}.d").glob("*.conf"))
    for file in files:
        section = None
        for raw in file.read_text().splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = sections.setdefault(line[1:-1], {})
                continue
            if section is None or "=" not in line:
                raise UnitError(f"{file}: cannot parse {raw!r}")
            key, value = (part.strip() for part in line.split("=", 1))
            if value == "":
                section[key] = []
            else:
                section.setdefault(key, []).append(value)
    return sections


def environment_file(path: Path) -> dict[str, str]:
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def expand(command: str, env: dict[str, str], specifiers: dict[str, str]) -> list[str]:
    """A unit's command line as systemd turns it into argv."""
    command = re.sub(r"%(.)", lambda m: specifiers.get(m.group(1), m.group(0)), command)
    argv: list[str] = []
    for word in shlex.split(command):
        whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if whole:  # $VAR alone: its value split at white space (nothing if empty or unset)
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(
                re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
            )
    return argv


def command_line(value: str) -> tuple[str, bool]:
    """A command line less its prefixes; True when ``-`` says its failure is ignored."""
    ignore = False
    while value and value[0] in "-@+!:":
        ignore = ignore or value[0] == "-"
        value = value[1:]
    return value, ignore


def _pidfile(name: str) -> Path:
    return STATE / f"{name}.pid"


def main_pid(name: str) -> int | None:
    try:
        pid = int(_pidfile(name).read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def service_environment(
    name: str, service: dict[str, list[str]]
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment and the specifiers a service's commands run with; credentials and
    state directories made."""
    env = {"PATH": PATH, "LANG": "C.UTF-8"}
    for value in service.get("EnvironmentFile", []):
        optional = value.startswith("-")
        path = Path(value.lstrip("-"))
        if not path.exists():
            if optional:
                continue
            raise UnitError(f"{name}: EnvironmentFile {path}: not found")
        env.update(environment_file(path))
    for value in service.get("Environment", []):
        for assignment in shlex.split(value):
            key, _, item = assignment.partition("=")
            env[key] = item
    credentials = Path("/run/credentials") / name
    specifiers = {"n": name, "N": name.rsplit(".", 1)[0], "%": "%", "d": str(credentials)}
    if service.get("LoadCredential"):
        credentials.mkdir(parents=True, exist_ok=True, mode=0o700)
        for value in service["LoadCredential"]:
            ident, _, source = value.partition(":")
            if not Path(source).exists():
                raise UnitError(
                    f"{name}: LoadCredential {source}: not found (status 243/CREDENTIALS)"
                )
            target = credentials / ident
            shutil.copyfile(source, target)
            target.chmod(0o400)
        env["CREDENTIALS_DIRECTORY"] = str(credentials)
    mode = int((service.get("StateDirectoryMode") or ["0755"])[-1], 8)
    dynamic = (service.get("DynamicUser") or ["no"])[-1] in ("yes", "true", "1")
    for value in service.get("StateDirectory", []):
        for part in value.split():
            directory = Path("/var/lib") / part
            if dynamic:  # systemd keeps it in /var/lib/private, /var/lib/NAME a link to it
                private = Path("/var/lib/private") / part
                Path("/var/lib/private").mkdir(mode=0o700, exist_ok=True)
                private.mkdir(exist_ok=True)
                private.chmod(mode)
                if not directory.is_symlink():
                    directory.symlink_to(Path("private") / part)
            else:
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(mode)
            env["STATE_DIRECTORY"] = str(directory)
    return env, specifiers


def start(name: str) -> None:
    if main_pid(name) is not None:
        return  # already running, as systemd
    unit = read_unit(name)
    if name.endswith(".socket"):
        service_name = (
            unit.get("Socket", {}).get("Service") or [name[: -len(".socket")] + ".service"]
        )[-1]
        service = read_unit(service_name).get("Service", {})
        env, specifiers = service_environment(service_name, service)
        command, _ = command_line(service["ExecStart"][-1])
        listen = [f"--listen={address}" for address in unit["Socket"]["ListenStream"]]
        argv = ["systemd-socket-activate", *listen, *expand(command, env, specifiers)]
    else:
        service = unit.get("Service", {})
        env, specifiers = service_environment(name, service)
        command, _ = command_line(service["ExecStart"][-1])
        argv = expand(command, env, specifiers)
    umask = int((unit.get("Service", {}).get("UMask") or ["0022"])[-1], 8)
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / f"{name}.log", "ab") as log:
        log.write(f"-- {time.strftime('%H:%M:%S')} started: {shlex.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=lambda: os.umask(umask),
        )
    _pidfile(name).write_text(str(process.pid))


def stop(name: str) -> None:
    pid = main_pid(name)
    unit = read_unit(name)
    service = unit.get("Service", {})
    if pid is not None and service.get("ExecStop"):
        env, specifiers = service_environment(name, service)
        env["MAINPID"] = str(pid)
        for value in service["ExecStop"]:
            command, ignore = command_line(value)
            with open(STATE / f"{name}.log", "ab") as log:
                done = subprocess.run(
                    expand(command, env, specifiers), env=env, stdout=log, stderr=log, timeout=90
                )
            if done.returncode != 0 and not ignore:
                print(f"{name}: ExecStop exited {done.returncode}", file=sys.stderr)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    _pidfile(name).unlink(missing_ok=True)
    shutil.rmtree(Path("/run/credentials") / name, ignore_errors=True)


def systemctl(args: list[str]) -> int:
    flags = [a for a in args if a.startswith("-")]
    words = [a for a in args if not a.startswith("-")]
    if not words:
        raise UnitError("systemctl: a command is needed")
    verb, names = words[0], [unit_name(n) for n in words[1:]]
    if verb == "daemon-reload":
        return 0
    if verb == "enable":
        for name in names:
            read_unit(name)  # a unit that is not installed cannot be enabled
        if "--now" in flags:
            for name in names:
                start(name)
        return 0
    if verb == "start":
        for name in names:
            start(name)
        return 0
    if verb == "stop":
        for name in names:
            stop(name)
        return 0
    if verb == "restart":
        for name in names:
            stop(name)
            start(name)
        return 0
    if verb == "kill":
        for name in names:
            pid = main_pid(name)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        return 0
    if verb in ("status", "is-active"):
        running = all(main_pid(name) is not None for name in names)
        for name in names:
            pid = main_pid(name)
            state = "active" if pid is not None else "inactive"
            if verb == "is-active":
                print(state)
            else:
                print(
                    f"* {name}\n     Active: {state}"
                    + (f" (running)\n   Main PID: {pid}" if pid else " (dead)")
                )
        return 0 if running else 3
    raise UnitError(f"systemctl {verb}: not supported by this substitute for systemd")


def journalctl(args: list[str]) -> int:
    names, lines, k = [], None, 0
    while k < len(args):
        if args[k] in ("-u", "--unit"):
            names.append(unit_name(args[k + 1]))
            k += 2
        elif args[k] in ("-n", "--lines"):
            lines = int(args[k + 1])
            k += 2
        elif args[k].startswith("--unit="):
            names.append(unit_name(args[k].split("=", 1)[1]))
            k += 1
        elif args[k] in ("--no-pager", "-q", "--quiet", "-b"):
            k += 1
        else:
            raise UnitError(f"journalctl {args[k]}: not supported by this substitute")
    for name in names:
        try:
            text = (STATE / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            text = []
        for line in text[-lines:] if lines else text:
            print(line)
    return 0


def main() -> int:
    tool = Path(sys.argv[0]).name
    try:
        return (journalctl if tool == "journalctl" else systemctl)(sys.argv[1:])
    except UnitError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
