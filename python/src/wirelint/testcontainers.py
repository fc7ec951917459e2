"""wirelint in a container, with Testcontainers: the ``wirelint:VERSION``
image started in front of a database container or URI, and a database
container to put it in front of.

Every container runs on the host's network (no port mappings): wirelint
listens on loopback ports it picks itself and says which in its log; the
database listens on a loopback port picked here. It needs the
``testcontainers`` package: ``pip install 'wirelint[testcontainers]'``.

>>> from wirelint.testcontainers import WirelintContainer, start_database
>>> db = start_database()                   # wirelint-ferretdb:1.24.2
>>> wirelint = WirelintContainer(db)        # or a mongodb:// URI
>>> uri = wirelint.start()                  # connect the code under test here
>>> ...
>>> report = wirelint.stop()                # the JSON report, as a dict
>>> print(wirelint.render("text"))
>>> db.stop()

:class:`WirelintContainer` is a :class:`wirelint.Proxy`: the same
``start``, ``stop``, ``report``, ``render``, ``check_upstream`` and
``mark``, so the pytest plugin runs either.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence, Union

from . import Proxy, client_uri

__all__ = ["FERRETDB_IMAGE", "WIRELINT_IMAGE", "StartedDatabase", "WirelintContainer", "free_port", "start_database"]


def _version() -> str:
    try:
        return metadata.version("wirelint")
    except metadata.PackageNotFoundError:
        return "0.1.0"


#: The wirelint image of this package's version.
WIRELINT_IMAGE = f"wirelint:{_version()}"
#: The FerretDB image wirelint's repository builds (``scripts/image.sh``).
FERRETDB_IMAGE = "wirelint-ferretdb:1.24.2"

_LISTENING = re.compile(r"connect your application to mongodb://([^/\s]+)/")
_ADMIN = re.compile(r"admin endpoints on http://([^/\s]+)/")
_OUT = "/out"
_CONFIG = "/etc/wirelint/wirelint.toml"


def _docker_container():
    """testcontainers' DockerContainer; ImportError with what to install."""
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError:
        raise ImportError(
            "the testcontainers package is not installed: pip install 'wirelint[testcontainers]'"
        ) from None
    return DockerContainer


def free_port() -> int:
    """A free TCP port on 127.0.0.1, picked by the system."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _logs(container) -> str:
    try:
        out, err = container.get_logs()
    except Exception:  # noqa: BLE001 - removed, or the engine is gone: no log
        return ""
    return out.decode(errors="replace") + err.decode(errors="replace")


def _start(container, ready: re.Pattern, timeout: float, what: str):
    """Starts ``container`` and waits until its log matches ``ready``;
    returns its log. A container that exits or stays silent is removed,
    and the error carries its log."""
    deadline = time.monotonic() + timeout
    try:
        try:
            container.start()
        except Exception as e:  # noqa: BLE001 - the engine's error (no image, no engine), said below
            first = (str(e) or type(e).__name__).splitlines()[0]
            raise RuntimeError(f"{what} did not start: {first}") from None
        while True:
            log = _logs(container)
            if ready.search(log):
                return log
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                code = wrapped.attrs.get("State", {}).get("ExitCode")
                raise RuntimeError(f"{what} did not start: it exited with status {code}:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start: it said nothing of being ready within {timeout:.0f} s:\n{log}")
            time.sleep(0.05)
    except BaseException:
        _remove(container)
        raise


def _remove(container) -> None:
    """Removes the container (killing it if it still runs) and closes
    testcontainers' client."""
    try:
        container.stop()
    except Exception:  # noqa: BLE001 - already gone
        pass


class StartedDatabase:
    """A database container started by :func:`start_database`."""

    def __init__(self, image: str, container, uri: str):
        self.image = image
        self.container = container
        self.uri = uri

    def get_connection_url(self) -> str:
        """The database's connection string (loopback, host network)."""
        return self.uri

    def stop(self) -> None:
        """Stops and removes the container."""
        if self.container is None:
            return
        container, self.container = self.container, None
        wrapped = container.get_wrapped_container()
        try:
            wrapped.stop(timeout=10)
        finally:
            _remove(container)


def start_database(image: str = FERRETDB_IMAGE, startup_timeout: float = 60.0) -> StartedDatabase:
    """Starts a database container on the host's network, listening on a
    free loopback port: ``image`` is a FerretDB image (its name says
    ferretdb; configured with FERRETDB_* variables) or else a MongoDB image
    (run with ``--port P --bind_ip 127.0.0.1``)."""
    docker_container = _docker_container()
    port = free_port()
    container = docker_container(image).with_kwargs(network_mode="host")
    if "ferretdb" in image.lower():
        container.with_env("FERRETDB_LISTEN_ADDR", f"127.0.0.1:{port}")
        # Its HTTP handlers on a port of their own: two never collide.
        container.with_env("FERRETDB_DEBUG_ADDR", "127.0.0.1:0")
        container.with_env("FERRETDB_TELEMETRY", "disable")
        ready = re.compile(r"Listening on")
    else:
        container.with_command(["--port", str(port), "--bind_ip", "127.0.0.1"])
        ready = re.compile(r"Waiting for connections")
    _start(container, ready, startup_timeout, f"the database container ({image})")
    return StartedDatabase(image, container, f"mongodb://127.0.0.1:{port}/")


class WirelintContainer(Proxy):
    """wirelint's image run in front of ``upstream`` (a mongodb:// URI, or
    a started container with ``get_connection_url()``: :func:`start_database`'s,
    testcontainers' MongoDbContainer), as a container on the host's network.

    ``report``: where the JSON report is copied when wirelint stops
    (default: a temporary directory); ``config``: a wirelint.toml, mounted
    into the container; ``stop_timeout``: seconds wirelint has to write its
    report after SIGTERM."""

    def __init__(
        self,
        upstream: Union[str, object],
        image: Optional[str] = None,
        report: Optional[os.PathLike] = None,
        config: Optional[os.PathLike] = None,
        args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ):
        uri = upstream if isinstance(upstream, str) else upstream.get_connection_url()
        super().__init__(uri, report=report, config=config, args=args, startup_timeout=startup_timeout)
        self.image = image or WIRELINT_IMAGE
        self.stop_timeout = stop_timeout
        #: Where the container writes the report (the mounted directory).
        self.written = Path(self._dir) / "report.json"
        #: The testcontainers DockerContainer, while it runs.
        self.container = None
        self._log = ""

    def start(self) -> str:
        """Starts the container and waits until wirelint listens; returns
        the URI to use."""
        docker_container = _docker_container()
        # The image runs as its own user: it writes the report here.
        os.chmod(self._dir, 0o777)
        command = [
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--report",
            f"{_OUT}/report.json",
            "--report-interval",
            "5s",
        ]
        container = docker_container(self.image).with_kwargs(network_mode="host")
        container.with_volume_mapping(self._dir, _OUT, "rw")
        if self.config:
            container.with_volume_mapping(str(Path(self.config).resolve()), _CONFIG, "ro")
            command += ["--config", _CONFIG]
        command += self.args
        container.with_command(command)
        container.with_env("WIRELINT_UPSTREAM", self.upstream)
        container.with_env("RUST_LOG", os.environ.get("RUST_LOG", "wirelint=info,warn"))
        self._log = _start(container, _LISTENING, self.startup_timeout, f"the wirelint container ({self.image})")
        self.container = container
        found = _LISTENING.search(self._log)
        admin = _ADMIN.search(self._log)
        self.admin = admin.group(1) if admin else None
        self.address = found.group(1)
        self.uri = client_uri(self.upstream, self.address)
        return self.uri

    def log(self) -> str:
        """What the container wrote on stdout and stderr so far."""
        if self.container is not None:
            self._log = _logs(self.container) or self._log
        return self._log

    def stop(self, timeout: Optional[float] = None) -> dict:
        """Stops the container gracefully (SIGTERM: wirelint writes its
        final report), removes it, and returns the report."""
        if self.container is not None:
            wrapped = self.container.get_wrapped_container()
            try:
                wrapped.stop(timeout=int(timeout or self.stop_timeout))
                wrapped.reload()
                self.returncode = wrapped.attrs.get("State", {}).get("ExitCode")
                self.log()
            finally:
                _remove(self.container)
                self.container = None
        if not self.written.exists():
            # Never started, or killed before it wrote one: not an older
            # report at report_path.
            raise FileNotFoundError(f"wirelint wrote no report ({self.written})")
        if self.report_path != self.written:
            self.report_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.written, self.report_path)
        return self.report()
