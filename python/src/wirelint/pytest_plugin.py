"""pytest plugin: run the test session through wirelint.

One line in the suite's configuration turns it on, e.g. in ``pytest.ini``::

    [pytest]
    addopts = --wirelint-upstream=mongodb://127.0.0.1:27017/ --wirelint-fail-on=warning

Then either

* ask for the ``wirelint_uri`` fixture (session scope) and connect with it
  instead of the database's URI, or
* name the environment variable the suite already reads its URI from
  (``--wirelint-env=MONGODB_URI``): wirelint starts before the tests are
  collected and the variable is pointed at it, so no test changes at all
  (with ``--wirelint-env`` alone, the variable's value is the upstream).

Without an upstream, the database and wirelint each run in a container
(``pip install 'wirelint[testcontainers]'``, where a Docker engine runs):
``--wirelint-image`` (default the FerretDB image ``wirelint-ferretdb:1.24.2``)
and ``--wirelint-proxy-image`` (default ``wirelint:VERSION``), both on the
host's network; see :mod:`wirelint.testcontainers`.

Before the first test, wirelint asks the database a hello: a database that
does not answer stops the session with wirelint's message. Each test is
told to wirelint as it starts, so findings name the tests whose operations
showed them. With pytest-xdist, the controller runs the one wirelint and
each worker's clients are told apart by ``appName=wirelint-gwN``, added to
the URI the worker hands out.

At the end of the session the findings are printed in the terminal summary,
the JSON report, SARIF and JUnit XML are written where asked, and the
session fails when a finding reaches ``--wirelint-fail-on``.
"""

from __future__ import annotations

import os
from typing import Optional

import pytest

from . import SEVERITIES, Proxy, mark, with_app_name, worst

_KEY = pytest.StashKey["_State"]()


class _State:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.proxy: Optional[Proxy] = None
        self.container = None
        self.report: Optional[dict] = None
        self.failed_on: Optional[str] = None
        self.error: Optional[str] = None
        #: Whether the suite asked for wirelint and it saw no data operation.
        self.saw_nothing = False
        #: In a pytest-xdist worker: the controller's wirelint (uri, admin)
        #: and this worker's application name.
        self.controller: Optional[dict] = getattr(config, "workerinput", {}).get("wirelint")
        self.worker: Optional[str] = None
        if self.controller is not None:
            self.worker = "wirelint-" + config.workerinput.get("workerid", "gw")
        #: The test running (its marker is posted when wirelint starts
        #: during its set-up), and why markers stopped, if they did.
        self.current: Optional[pytest.Item] = None
        self.mark_error: Optional[str] = None
        #: Why the database did not answer through wirelint, if it did not.
        self.down: Optional[str] = None

    def option(self, name: str) -> Optional[str]:
        value = self.config.getoption("wirelint_" + name)
        if value in (None, ""):
            value = self.config.getini("wirelint_" + name) or None
        return value

    def upstream(self) -> Optional[str]:
        explicit = self.option("upstream") or os.environ.get("WIRELINT_UPSTREAM")
        if explicit:
            return explicit
        var = self.option("env")
        return os.environ.get(var) if var else None

    def start(self) -> str:
        if self.controller is not None:
            # A pytest-xdist worker: the controller's wirelint, this
            # worker's clients named apart.
            return with_app_name(self.controller["uri"], self.worker)
        if self.proxy:
            return self.proxy.uri
        upstream = self.upstream()
        args = []
        if self.config.getoption("wirelint_show_values"):
            args.append("--show-values")
        settings = {"report": self.option("report"), "config": self.option("config"), "args": args}
        if upstream:
            self.proxy = Proxy(upstream, **settings)
        else:
            # No database: one in a container, and wirelint in another.
            from .testcontainers import WirelintContainer

            self.proxy = WirelintContainer(self._container(), image=self.option("proxy_image"), **settings)
        try:
            uri = self.proxy.start()
        except BaseException as e:
            # Nothing to report at the end: the tests that ask for
            # wirelint_uri fail with this error.
            self.error = f"wirelint did not start: {e}"
            self.proxy.cleanup()
            self.proxy = None
            self._stop_container()
            raise
        down = self.proxy.check_upstream()
        if down:
            self.down = down
            self.stop()
            # No test ran: no report of nothing left behind.
            self.proxy.report_path.unlink(missing_ok=True)
            pytest.exit(
                f"wirelint: the database does not answer through wirelint: {down}. No test was run.",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )
        if self.current is not None:
            self.mark(self.current)
        return uri

    def admin(self) -> Optional[str]:
        if self.controller is not None:
            return self.controller.get("admin")
        return self.proxy.admin if self.proxy else None

    def mark(self, item: Optional[pytest.Item]) -> None:
        """Tells wirelint which test this worker runs (None: it ended)."""
        admin = self.admin()
        if not admin or self.mark_error:
            return
        test = file = line = None
        if item is not None:
            test = item.nodeid
            path, lineno, _ = item.location
            file, line = path, (lineno + 1 if lineno is not None else None)
        try:
            mark(admin, test, file=file, line=line, worker=self.worker)
        except OSError as e:
            # Never the tests' problem: findings just name no test.
            self.mark_error = f"wirelint could not be told which test runs ({e}); findings name no test"

    def _container(self):
        from .testcontainers import FERRETDB_IMAGE, start_database

        image = self.option("image") or FERRETDB_IMAGE
        try:
            self.container = start_database(image)
        except ImportError:
            raise pytest.UsageError(
                "wirelint: no database to run in front of: give --wirelint-upstream URI "
                "(or wirelint_upstream in the ini file, or WIRELINT_UPSTREAM), "
                "or pip install 'wirelint[testcontainers]' with a Docker engine running"
            ) from None
        except Exception as e:  # noqa: BLE001 - the engine's or the image's error, said below
            self.down = str(e)
            pytest.exit(
                f"wirelint: no database to run in front of, and the database container ({image}) could not be "
                f"started — is a Docker engine running, and is the image there? ({(str(e) or type(e).__name__).splitlines()[0]}). "
                "No test was run.",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )
        return self.container

    def _stop_container(self) -> None:
        if self.container is not None:
            container, self.container = self.container, None
            container.stop()

    def stop(self) -> None:
        if not self.proxy:
            return
        try:
            self.report = self.proxy.stop()
        except (OSError, ValueError) as e:
            self.error = f"wirelint wrote no report ({e}); its log:\n{self.proxy.log()}"
        finally:
            self._stop_container()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wirelint", "wirelint: data-modelling checks on the session's MongoDB traffic")
    options = [
        ("upstream", "URI", "the database to run wirelint in front of (mongodb:// or mongodb+srv://)"),
        ("env", "VAR", "point this environment variable (the URI the suite reads) at wirelint before collection"),
        ("fail-on", "LEVEL", "fail the session when a finding at or above this level exists: " + ", ".join(SEVERITIES)),
        ("report", "FILE", "write the JSON report here"),
        ("sarif", "FILE", "write the findings as SARIF 2.1.0 here (for code scanning)"),
        ("junit", "FILE", "write the findings as JUnit XML here (for CI test views), one test case each"),
        ("config", "FILE", "a wirelint.toml (partition keys, rule thresholds)"),
        (
            "image",
            "IMAGE",
            "the database image started when no upstream is given, with wirelint in a container of its own "
            "(default wirelint-ferretdb:1.24.2; needs wirelint[testcontainers])",
        ),
        ("proxy-image", "IMAGE", "the wirelint image run in front of that database (default wirelint:VERSION)"),
    ]
    for name, metavar, help_text in options:
        dest = "wirelint_" + name.replace("-", "_")
        group.addoption("--wirelint-" + name, dest=dest, metavar=metavar, default=None, help=help_text)
        parser.addini(dest, help_text)
    group.addoption(
        "--wirelint-show-values",
        dest="wirelint_show_values",
        action="store_true",
        help="let findings carry example values from the traffic (off by default: findings carry no data)",
    )


def pytest_configure(config: pytest.Config) -> None:
    state = _State(config)
    config.stash[_KEY] = state
    level = state.option("fail_on")
    if level and level not in SEVERITIES:
        raise pytest.UsageError(f"--wirelint-fail-on must be one of {', '.join(SEVERITIES)}, not {level!r}")


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash[_KEY]
    var = state.option("env")
    if var:
        # Before collection: modules that read the URI at import see wirelint's.
        os.environ[var] = state.start()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist, on the controller: each worker is handed the one
    wirelint, started now if no variable started it already."""
    state = node.config.stash[_KEY]
    if state.proxy is None and not _configured(state):
        return
    state.start()
    node.workerinput["wirelint"] = {"uri": state.proxy.uri, "admin": state.proxy.admin}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    state = item.config.stash[_KEY]
    state.current = item
    state.mark(item)
    try:
        yield
    finally:
        state.current = None
        state.mark(None)


@pytest.fixture(scope="session")
def wirelint_uri(request: pytest.FixtureRequest) -> str:
    """The connection string to use instead of the database's: wirelint in
    front of it, started once for the session."""
    return request.config.stash[_KEY].start()


@pytest.fixture(scope="session")
def wirelint_proxy(request: pytest.FixtureRequest, wirelint_uri: str) -> Proxy:
    """The running :class:`wirelint.Proxy` (its report so far:
    ``wirelint_proxy.report()``)."""
    return request.config.stash[_KEY].proxy


def _configured(state) -> bool:
    """Whether the suite asked for wirelint (an upstream, a variable to
    repoint or a level to fail on), so that its seeing nothing matters."""
    return any(state.option(o) for o in ("upstream", "env", "fail_on"))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash[_KEY]
    if state.controller is not None or state.down:
        # A pytest-xdist worker (the controller reports), or no test ran.
        return
    state.stop()
    level = state.option("fail_on")
    if state.report is None:
        # Never started: no test asked for `wirelint_uri` and no variable
        # was repointed.
        if state.proxy is None and not state.error and _configured(state):
            state.saw_nothing = True
            if level and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    if state.report.get("counters", {}).get("operations", 0) == 0:
        state.saw_nothing = True
        if level and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    sarif = state.option("sarif")
    if sarif:
        with open(sarif, "w", encoding="utf-8") as f:
            f.write(state.proxy.render("sarif"))
    junit = state.option("junit")
    if junit:
        with open(junit, "w", encoding="utf-8") as f:
            f.write(state.proxy.render("junit", fail_on=level))
    found = worst(state.report)
    if level and found and SEVERITIES.index(found) >= SEVERITIES.index(level):
        state.failed_on = found
        if session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_KEY, None)
    if state is not None and state.proxy is not None:
        # After the summary rendered the report: nothing left in /tmp.
        state.proxy.cleanup()


#: What to say when wirelint saw no data operation.
SAW_NOTHING = (
    "wirelint saw no data operations: no test's database traffic went through it, so the "
    "findings say nothing about this suite. Likely causes: the suite builds its client from a "
    "URI of its own (use the `wirelint_uri` fixture, or --wirelint-env=VAR naming the variable "
    "the suite reads before it is read); the client is created before the plugin repoints the "
    "variable (at import of a module loaded earlier); or no test touches the database."
)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_KEY, None)
    if state is None:
        return
    tr = terminalreporter
    if (state.proxy is None and not state.saw_nothing) or state.down:
        return
    tr.section("wirelint")
    if state.saw_nothing:
        level = state.option("fail_on")
        tail = f" The session fails: --wirelint-fail-on {level} is set." if level else ""
        tr.write_line(SAW_NOTHING + tail, red=bool(level), yellow=not level, bold=True)
    if state.proxy is None:
        return
    if state.error:
        tr.write_line(state.error, red=True)
        return
    findings = state.report.get("findings", [])
    tr.write(state.proxy.render("text"))
    where = [f"report: {state.proxy.report_path}"]
    if state.option("sarif"):
        where.append(f"SARIF: {state.option('sarif')}")
    if state.option("junit"):
        where.append(f"JUnit XML: {state.option('junit')}")
    if state.mark_error:
        tr.write_line(f"wirelint: {state.mark_error}", yellow=True)
    tr.write_line(f"wirelint: {len(findings)} finding(s); " + ", ".join(where))
    if state.failed_on:
        tr.write_line(
            f"wirelint: a finding of severity {state.failed_on} reached --wirelint-fail-on "
            f"{state.option('fail_on')}: the session fails",
            red=True,
            bold=True,
        )
