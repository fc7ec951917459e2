"use strict";
// Run wirelint, the MongoDB wire-protocol proxy that flags data-modelling
// mistakes, from Node: the bundled binary, the connection string to hand
// to clients, and one proxy process started in front of a database.
//
//   const { Proxy } = require("wirelint");
//   const proxy = new Proxy("mongodb://127.0.0.1:27017/");
//   const uri = await proxy.start();   // connect the code under test here
//   …
//   const report = await proxy.stop(); // the JSON report, parsed
//
// The Jest and Vitest global setups (jest/, vitest/) are built on it.

const childProcess = require("node:child_process");
const fs = require("node:fs");
const http = require("node:http");
const os = require("node:os");
const path = require("node:path");

/** Severities in increasing order, as reports and `--fail-on` spell them. */
const SEVERITIES = Object.freeze(["info", "warning", "error"]);

// Options that describe how to reach the database, not how to talk to
// wirelint: the client connects to wirelint over plain TCP, and wirelint
// presents itself as a router (so no replica-set name, no direct connection).
const UPSTREAM_ONLY = new Set([
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
]);

const LISTENING = /connect your application to mongodb:\/\/([^/\s]+)\//;
const ADMIN = /admin endpoints on http:\/\/([^/\s]+)\//;

/** The bundled executable's path (`native/wirelint` in this package). */
const BUNDLED = path.join(__dirname, "..", "native", process.platform === "win32" ? "wirelint.exe" : "wirelint");

/**
 * The wirelint executable: `$WIRELINT_BINARY`, else the one this package
 * carries. Throws when neither exists.
 */
function binary() {
  const explicit = process.env.WIRELINT_BINARY;
  if (explicit) return explicit;
  if (fs.existsSync(BUNDLED)) return BUNDLED;
  throw new Error(
    `the wirelint binary is not in this package (${BUNDLED}): it carries a Linux x86_64 build; ` +
      "on other platforms set WIRELINT_BINARY to a wirelint executable",
  );
}

/**
 * The connection string a client should use to reach `upstream` through
 * wirelint listening at `address` (`host:port`): the same credentials,
 * database and options, with the host replaced and the options that only
 * concern the way to the database (TLS, replica-set name, SRV) left out.
 */
function clientUri(upstream, address) {
  const m = /^(mongodb(?:\+srv)?):\/\/([^/?]*)(\/[^?]*)?(?:\?(.*))?$/.exec(upstream);
  if (!m) throw new Error("the upstream is not a mongodb:// or mongodb+srv:// connection string");
  const [, , authority, dbPath, query] = m;
  const at = authority.lastIndexOf("@");
  const userinfo = at >= 0 ? authority.slice(0, at + 1) : "";
  const options = (query || "")
    .split("&")
    .filter((pair) => pair !== "")
    .filter((pair) => {
      const key = decodeURIComponent(pair.split("=")[0].replace(/\+/g, " "));
      return !UPSTREAM_ONLY.has(key.toLowerCase());
    });
  const tail = options.length ? "?" + options.join("&") : "";
  return `mongodb://${userinfo}${address}${dbPath || "/"}${tail}`;
}

/** The highest severity among a report's findings, or null. */
function worst(report) {
  let found = -1;
  for (const f of (report && report.findings) || []) {
    found = Math.max(found, SEVERITIES.indexOf(f.severity));
  }
  return found >= 0 ? SEVERITIES[found] : null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One wirelint process in front of `upstream`. */
class Proxy {
  /**
   * @param {string} upstream the database, mongodb:// or mongodb+srv://
   * @param {object} [options]
   * @param {string} [options.report] where the JSON report goes (default: a temporary directory)
   * @param {string} [options.config] a wirelint.toml
   * @param {string[]} [options.args] further `wirelint proxy` arguments
   * @param {number} [options.startupTimeout] milliseconds to wait for it to listen (30 000)
   */
  constructor(upstream, options = {}) {
    this.upstream = upstream;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "wirelint-"));
    this.reportPath = options.report ? path.resolve(options.report) : path.join(this.dir, "report.json");
    this.logPath = path.join(this.dir, "wirelint.log");
    this.config = options.config || null;
    this.args = options.args || [];
    this.startupTimeout = options.startupTimeout || 30000;
    this.process = null;
    this.address = null;
    /** The admin endpoints' address (host:port), where the running test is told. */
    this.admin = null;
    this.uri = null;
    this.exit = null; // { code, signal } once it has ended
    this._exited = null;
    this._onExit = null;
  }

  /** Starts wirelint and waits until it listens; resolves to the URI to use. */
  async start() {
    const args = [
      "proxy",
      "--listen",
      "127.0.0.1:0",
      "--upstream",
      this.upstream,
      "--report",
      this.reportPath,
      "--report-interval",
      "5s",
      "--admin",
      "127.0.0.1:0",
    ];
    if (this.config) args.push("--config", this.config);
    args.push(...this.args);
    fs.mkdirSync(path.dirname(this.reportPath), { recursive: true });
    const env = { ...process.env };
    if (!env.RUST_LOG) env.RUST_LOG = "wirelint=info,warn";
    // Every setting is on the command line: none comes from the variables
    // the binary would also read.
    // (A token on the admin endpoints would refuse the test markers.)
    for (const name of ["WIRELINT_FAIL_ON", "WIRELINT_LISTEN", "WIRELINT_REPORT", "WIRELINT_UPSTREAM", "WIRELINT_CONFIG", "WIRELINT_ADMIN", "WIRELINT_ADMIN_TOKEN"]) {
      delete env[name];
    }
    const log = fs.openSync(this.logPath, "w");
    let spawnError = null;
    try {
      this.process = childProcess.spawn(binary(), args, { stdio: ["ignore", log, log], env });
    } finally {
      fs.closeSync(log);
    }
    this._exited = new Promise((resolve) => {
      this.process.on("exit", (code, signal) => {
        this.exit = { code, signal };
        resolve();
      });
      this.process.on("error", (err) => {
        spawnError = err;
        this.exit = { code: null, signal: null };
        resolve();
      });
    });
    // Never outlive the test runner, even when the teardown does not run.
    this._onExit = () => {
      if (this.exit === null) this.process.kill("SIGTERM");
    };
    process.on("exit", this._onExit);
    this.process.unref();

    const deadline = Date.now() + this.startupTimeout;
    while (Date.now() < deadline) {
      const text = this.log();
      const found = LISTENING.exec(text);
      if (found) {
        const admin = ADMIN.exec(text);
        this.admin = admin ? admin[1] : null;
        this.address = found[1];
        this.uri = clientUri(this.upstream, this.address);
        return this.uri;
      }
      if (spawnError) throw new Error(`cannot run ${binary()}: ${spawnError.message}`);
      if (this.exit) throw new Error(`wirelint exited with ${describeExit(this.exit)}:\n${this.log()}`);
      await sleep(20);
    }
    this.process.kill("SIGKILL");
    throw new Error(`wirelint did not start listening within ${Math.round(this.startupTimeout / 1000)} s:\n${this.log()}`);
  }

  /**
   * Asks wirelint whether the database answers a hello through it:
   * resolves to null when it does, else to the message a client would get.
   */
  async checkUpstream() {
    if (!this.admin) return null;
    try {
      const { status, body } = await request(this.admin, "GET", "/upstream", null, 60000);
      if (status === 200) return null;
      try {
        return JSON.parse(body).error || `HTTP ${status}`;
      } catch {
        return `HTTP ${status}`;
      }
    } catch (e) {
      return `wirelint's admin endpoint did not answer: ${e.message}`;
    }
  }

  /** What wirelint wrote on stderr so far (live findings, warnings). */
  log() {
    try {
      return fs.readFileSync(this.logPath, "utf8");
    } catch {
      return "";
    }
  }

  /**
   * Stops wirelint gracefully (SIGTERM: it writes its final report) and
   * resolves to the report.
   */
  async stop(timeout = 30000) {
    if (this.process && this.exit === null) {
      // Keep the event loop alive until it has ended (it is unref'd while
      // it runs, so that it never holds the test runner open).
      this.process.ref();
      this.process.kill("SIGTERM");
      let timer;
      await Promise.race([this._exited, new Promise((resolve) => (timer = setTimeout(resolve, timeout)))]);
      clearTimeout(timer);
      if (this.exit === null) {
        this.process.kill("SIGKILL");
        await this._exited;
      }
    }
    if (this._onExit) process.removeListener("exit", this._onExit);
    return this.report();
  }

  /**
   * Removes the temporary directory (wirelint's log), unless the report is
   * kept there (no report path was given): call it once the report has
   * been read and rendered.
   */
  cleanup() {
    if (path.dirname(this.reportPath) !== this.dir) {
      fs.rmSync(this.dir, { recursive: true, force: true });
    }
  }

  /** The latest JSON report wirelint wrote. */
  report() {
    return JSON.parse(fs.readFileSync(this.reportPath, "utf8"));
  }

  /**
   * The report rendered by `wirelint report --format FMT` (`text`,
   * `markdown`, `sarif`, `junit` or `json`); `failOn`: the level from which
   * a JUnit test case fails; `file`: another report than this proxy's.
   */
  render(format = "text", failOn = null, file = null) {
    const level = failOn ? ["--fail-on", failOn] : [];
    const out = childProcess.spawnSync(binary(), ["report", "--format", format, ...level, file || this.reportPath], {
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
    if (out.error) throw new Error(`wirelint report failed: ${out.error.message}`);
    if (out.status !== 0 && out.status !== 3) throw new Error(`wirelint report failed: ${(out.stderr || "").trim()}`);
    return out.stdout;
  }
}

/** One HTTP request to wirelint's admin endpoints; resolves to {status, body}. */
function request(admin, method, pathname, body, timeout = 10000) {
  const [host, port] = [admin.slice(0, admin.lastIndexOf(":")), Number(admin.slice(admin.lastIndexOf(":") + 1))];
  return new Promise((resolve, reject) => {
    const data = body === null ? null : Buffer.from(JSON.stringify(body));
    const req = http.request(
      {
        host,
        port,
        method,
        path: pathname,
        timeout,
        headers: data ? { "Content-Type": "application/json", "Content-Length": data.length } : {},
      },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer within ${timeout} ms`)));
    req.on("error", reject);
    req.end(data || undefined);
  });
}

/**
 * Tells the wirelint whose admin endpoints are at `admin` which test runs
 * now (`test` null: it ended), so that findings name the tests whose
 * operations showed them. `worker`: the application name the worker's
 * clients give (see `withAppName`), for parallel workers.
 */
async function mark(admin, { test = null, file = null, line = null, worker = null } = {}) {
  const body = {};
  for (const [k, v] of Object.entries({ worker, test, file, line })) if (v !== null && v !== undefined) body[k] = v;
  const { status, body: text } = await request(admin, "POST", "/tests", body);
  if (status !== 200) throw new Error(`HTTP ${status}: ${text.trim()}`);
}

/**
 * `uri` with `appName=name` added, unless it names an application already:
 * how a test runner's parallel worker is told apart.
 */
function withAppName(uri, name) {
  if (/[?&]appname=/i.test(uri)) return uri;
  return `${uri}${uri.includes("?") ? "&" : "?"}appName=${encodeURIComponent(name)}`;
}

function describeExit(exit) {
  return exit.signal ? `signal ${exit.signal}` : `status ${exit.code}`;
}

module.exports = { SEVERITIES, Proxy, binary, clientUri, mark, request, withAppName, worst };
