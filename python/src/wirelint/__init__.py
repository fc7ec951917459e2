"""Run wirelint, the MongoDB wire-protocol proxy that flags data-modelling
mistakes, from Python.

The package carries the ``wirelint`` binary (``wirelint --help``) and a
pytest plugin (:mod:`wirelint.pytest_plugin`). :class:`Proxy` starts the
binary in front of a database and hands back the URI to use instead.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import parse_qsl, urlencode

__all__ = ["Proxy", "binary", "client_uri", "mark", "with_app_name", "worst", "SEVERITIES"]

#: Severities in increasing order, as reports and ``--fail-on`` spell them.
SEVERITIES = ("info", "warning", "error")

# Options that describe how to reach the database, not how to talk to
# wirelint: the client connects to wirelint over plain TCP, and wirelint
# presents itself as a router (so no replica-set name, no direct connection).
_UPSTREAM_ONLY = {
    "replicaset",
    "directconnection",
    "loadbalanced",
    "srvservicename",
    "srvmaxhosts",
    "tls",
    "ssl",
    "tlscafile",
    "tlscertificatekeyfile",
    "tlscertificatekeyfilepassword",
    "tlsallowinvalidcertificates",
    "tlsallowinvalidhostnames",
    "tlsinsecure",
    "tlsdisableocspendpointcheck",
}

_LISTENING = re.compile(r"connect your application to mongodb://([^/\s]+)/")
_ADMIN = re.compile(r"admin endpoints on http://([^/\s]+)/")


def binary() -> str:
    """The wirelint executable: ``$WIRELINT_BINARY``, else the one this
    package installed next to the Python interpreter, else ``wirelint`` on
    ``PATH``."""
    explicit = os.environ.get("WIRELINT_BINARY")
    if explicit:
        return explicit
    name = "wirelint.exe" if os.name == "nt" else "wirelint"
    installed = Path(sysconfig.get_path("scripts")) / name
    if installed.exists():
        return str(installed)
    found = shutil.which("wirelint")
    if found:
        return found
    raise FileNotFoundError(
        "the wirelint binary is not installed: `pip install wirelint` (the wheel carries it), "
        "or set WIRELINT_BINARY to its path"
    )


def with_app_name(uri: str, name: str) -> str:
    """``uri`` with ``appName=name`` added, unless it names an application
    already: how a test runner's parallel worker is told apart."""
    if re.search(r"[?&]appname=", uri, re.IGNORECASE):
        return uri
    return uri + ("&" if "?" in uri else "?") + "appName=" + name


def client_uri(upstream: str, address: str) -> str:
    """The connection string a client should use to reach ``upstream``
    through wirelint listening at ``address`` (``host:port``): the same
    credentials, database and options, with the host replaced and the
    options that only concern the way to the database (TLS, replica-set
    name, SRV) left out."""
    match = re.match(r"^(mongodb(?:\+srv)?)://([^/?]*)(/[^?]*)?(?:\?(.*))?$", upstream)
    if not match:
        raise ValueError("the upstream is not a mongodb:// or mongodb+srv:// connection string")
    _, authority, path, query = match.groups()
    userinfo = authority.rpartition("@")[0]
    userinfo = userinfo + "@" if userinfo else ""
    options = [(k, v) for k, v in parse_qsl(query or "", keep_blank_values=True) if k.lower() not in _UPSTREAM_ONLY]
    tail = "?" + urlencode(options, safe=":,") if options else ""
    return f"mongodb://{userinfo}{address}{path or '/'}{tail}"


class Proxy:
    """One wirelint process in front of ``upstream``.

    >>> proxy = Proxy("mongodb://127.0.0.1:27017/")
    >>> proxy.start()            # returns the URI to connect to instead
    >>> ...
    >>> report = proxy.stop()    # the JSON report, as a dict
    """

    def __init__(
        self,
        upstream: str,
        report: Optional[os.PathLike] = None,
        config: Optional[os.PathLike] = None,
        args: Sequence[str] = (),
        startup_timeout: float = 30.0,
    ):
        self.upstream = upstream
        self._dir = tempfile.mkdtemp(prefix="wirelint-")
        self.report_path = Path(report) if report else Path(self._dir) / "report.json"
        self.log_path = Path(self._dir) / "wirelint.log"
        self.config = config
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.process: Optional[subprocess.Popen] = None
        self.address: Optional[str] = None
        #: The admin endpoints' address (``host:port``), where the running
        #: test is told (:meth:`mark`).
        self.admin: Optional[str] = None
        self.uri: Optional[str] = None
        self.returncode: Optional[int] = None

    def start(self) -> str:
        """Starts wirelint and waits until it listens; returns the URI to use."""
        command = [
            binary(),
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            self.upstream,
            "--report",
            str(self.report_path),
            "--report-interval",
            "5s",
            "--admin",
            "127.0.0.1:0",
        ]
        if self.config:
            command += ["--config", str(self.config)]
        command += self.args
        self.report_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "wirelint=info,warn")
        # The admin endpoints serve the test markers on loopback: a token
        # set for another wirelint would refuse them.
        env.pop("WIRELINT_ADMIN_TOKEN", None)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            log = self.log()
            found = _LISTENING.search(log)
            if found:
                admin = _ADMIN.search(log)
                self.admin = admin.group(1) if admin else None
                self.address = found.group(1)
                self.uri = client_uri(self.upstream, self.address)
                return self.uri
            if self.process.poll() is not None:
                raise RuntimeError(f"wirelint exited with status {self.process.returncode}:\n{self.log()}")
            time.sleep(0.02)
        self.process.kill()
        raise RuntimeError(f"wirelint did not start listening within {self.startup_timeout:.0f} s:\n{self.log()}")

    def check_upstream(self) -> Optional[str]:
        """Asks wirelint whether the database answers a hello through it:
        None when it does, else the message a client would get."""
        if not self.admin:
            return None
        try:
            with urllib.request.urlopen(f"http://{self.admin}/upstream", timeout=60) as answer:
                json.load(answer)
                return None
        except urllib.error.HTTPError as e:
            try:
                return json.load(e).get("error") or f"HTTP {e.code}"
            except ValueError:
                return f"HTTP {e.code}"
        except (OSError, ValueError) as e:
            return f"wirelint's admin endpoint did not answer: {e}"

    def mark(self, test: Optional[str], file: Optional[str] = None, line: Optional[int] = None, worker: Optional[str] = None) -> None:
        """Tells wirelint which test runs now (``None``: the test ended), so
        that findings name the tests whose operations showed them.
        ``worker``: the application name the worker's clients give
        (:func:`with_app_name`), for parallel workers. Raises OSError when
        wirelint cannot be told."""
        if not self.admin:
            raise OSError("wirelint's admin endpoints are not known")
        mark(self.admin, test, file=file, line=line, worker=worker)

    def log(self) -> str:
        """What wirelint wrote on stderr so far (live findings, warnings)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0) -> dict:
        """Stops wirelint gracefully (it writes its final report) and returns
        the report."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process:
            self.returncode = self.process.returncode
        return self.report()

    def report(self) -> dict:
        """The latest JSON report wirelint wrote."""
        with open(self.report_path, encoding="utf-8") as f:
            return json.load(f)

    def render(self, fmt: str = "text", fail_on: Optional[str] = None) -> str:
        """The report rendered by ``wirelint report --format FMT``
        (``text``, ``markdown``, ``sarif``, ``junit`` or ``json``);
        ``fail_on``: the level from which a JUnit test case fails."""
        level = ["--fail-on", fail_on] if fail_on else []
        out = subprocess.run(
            [binary(), "report", "--format", fmt, *level, str(self.report_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode not in (0, 3):
            raise RuntimeError(f"wirelint report failed: {out.stderr.strip()}")
        return out.stdout

    def cleanup(self) -> None:
        """Removes the temporary directory (wirelint's log), unless the
        report is kept there (no report path was given): call it once the
        report has been read and rendered."""
        if Path(self._dir) not in self.report_path.parents:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "Proxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def mark(
    admin: str, test: Optional[str], file: Optional[str] = None, line: Optional[int] = None, worker: Optional[str] = None
) -> None:
    """Tells the wirelint whose admin endpoints are at ``admin``
    (``host:port``) which test runs now: see :meth:`Proxy.mark`."""
    body = {k: v for k, v in {"worker": worker, "test": test, "file": file, "line": line}.items() if v is not None}
    request = urllib.request.Request(
        f"http://{admin}/tests",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def worst(report: dict) -> Optional[str]:
    """The highest severity among a report's findings, or None."""
    found = [f.get("severity") for f in report.get("findings", []) if f.get("severity") in SEVERITIES]
    return max(found, key=SEVERITIES.index) if found else None
