"use strict";
// wirelint in a container, with Testcontainers: the `wirelint:VERSION`
// image started in front of a database container or URI, and a database
// container to put it in front of. Every container runs on the host's
// network (no port mappings): wirelint listens on loopback ports it picks
// itself and says which in its log; the database listens on a loopback port
// picked here. `testcontainers` is an optional peer dependency
// (`npm install --save-dev testcontainers`).
//
//   const { startDatabase, WirelintContainer } = require("wirelint/testcontainers");
//   const db = await startDatabase();              // wirelint-ferretdb:1.24.2
//   const wirelint = new WirelintContainer(db);    // or a mongodb:// URI
//   process.env.MONGODB_URI = await wirelint.start();
//   …
//   const report = await wirelint.stop();          // the JSON report, parsed
//   console.log(wirelint.render("text"));
//   wirelint.cleanup();
//   await db.stop();
//
// WirelintContainer is a Proxy (require("wirelint")): the same start, stop,
// report, render, checkUpstream and admin address, so the Jest and Vitest
// global setups run either.

const childProcess = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const path = require("node:path");
const { Proxy, clientUri } = require("./index");

const VERSION = require("../package.json").version;
/** The wirelint image of this package's version. */
const WIRELINT_IMAGE = `wirelint:${VERSION}`;
/** The FerretDB image wirelint's repository builds (`scripts/image.sh`). */
const FERRETDB_IMAGE = "wirelint-ferretdb:1.24.2";

const LISTENING = /connect your application to mongodb:\/\/([^/\s]+)\//;
const ADMIN = /admin endpoints on http:\/\/([^/\s]+)\//;
/** Where the container writes its report (a bind-mounted directory). */
const OUT = "/out";
const CONFIG = "/etc/wirelint/wirelint.toml";

/** Thrown when the `testcontainers` package cannot be found. */
class MissingTestcontainers extends Error {}

/**
 * The `testcontainers` module, as the project installed it (looked up from
 * `root`, then from this package). Throws MissingTestcontainers when it is
 * not installed.
 */
function load(root = process.cwd()) {
  let resolved;
  try {
    resolved = require.resolve("testcontainers", { paths: [root, __dirname] });
  } catch (e) {
    if (e && e.code !== "MODULE_NOT_FOUND") throw e;
    throw new MissingTestcontainers(
      "the testcontainers package is not installed: `npm install --save-dev testcontainers` " +
        "(11.x on Node 20; 12.x needs Node 22.22 or later)",
    );
  }
  return require(resolved);
}

/** A free TCP port on 127.0.0.1, picked by the system. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Collects a container's log (stdout and stderr) as it comes. */
function collector() {
  const sink = { text: "" };
  sink.consume = (stream) => {
    stream.on("data", (chunk) => {
      sink.text += String(chunk);
      if (!sink.text.endsWith("\n")) sink.text += "\n";
    });
    stream.on("error", () => {});
  };
  return sink;
}

/**
 * Removes the container `id` when the process exits with it still there
 * (without Ryuk, nothing else would): `docker rm -f`, best effort.
 * Returns the listener, for process.removeListener.
 */
function removeOnExit(id) {
  const listener = () => {
    try {
      childProcess.spawnSync("docker", ["rm", "-f", id], { stdio: "ignore", timeout: 10000 });
    } catch {
      // No docker command: nothing more to do.
    }
  };
  process.on("exit", listener);
  return listener;
}

/** The first line of an error's message. */
function firstLine(e) {
  return String((e && e.message) || e).split("\n")[0];
}

/** A database container started by startDatabase. */
class StartedDatabase {
  constructor(image, container, uri, listener) {
    this.image = image;
    this.container = container;
    this.uri = uri;
    this._listener = listener;
  }

  /** The database's connection string (loopback, host network). */
  getConnectionString() {
    return this.uri;
  }

  /** Stops and removes the container. */
  async stop() {
    if (!this.container) return;
    const container = this.container;
    this.container = null;
    try {
      await container.stop({ timeout: 10000 });
    } finally {
      process.removeListener("exit", this._listener);
    }
  }
}

/**
 * Starts a database container on the host's network, listening on a free
 * loopback port: `image` is a FerretDB image (its name says ferretdb;
 * default wirelint-ferretdb:1.24.2, configured with FERRETDB_* variables)
 * or else a MongoDB image (run with `--port P --bind_ip 127.0.0.1`).
 * Resolves to a StartedDatabase.
 */
async function startDatabase(image = FERRETDB_IMAGE, { root = process.cwd(), startupTimeout = 60000 } = {}) {
  const { GenericContainer, Wait } = load(root);
  const port = await freePort();
  const log = collector();
  let container = new GenericContainer(image)
    .withNetworkMode("host")
    .withStartupTimeout(startupTimeout)
    .withLogConsumer(log.consume);
  if (/ferretdb/i.test(image)) {
    container = container
      .withEnvironment({
        FERRETDB_LISTEN_ADDR: `127.0.0.1:${port}`,
        // Its HTTP handlers on a port of their own: two never collide.
        FERRETDB_DEBUG_ADDR: "127.0.0.1:0",
        FERRETDB_TELEMETRY: "disable",
      })
      .withWaitStrategy(Wait.forLogMessage(/Listening on/));
  } else {
    container = container
      .withCommand(["--port", String(port), "--bind_ip", "127.0.0.1"])
      .withWaitStrategy(Wait.forLogMessage(/Waiting for connections/));
  }
  let started;
  try {
    started = await container.start();
  } catch (e) {
    const tail = log.text.trim() ? `; its log:\n${log.text}` : "";
    throw new Error(`the database container (${image}) did not start: ${firstLine(e)}${tail}`);
  }
  return new StartedDatabase(image, started, `mongodb://127.0.0.1:${port}/`, removeOnExit(started.getId()));
}

/** wirelint's image run in front of a database, as a container. */
class WirelintContainer extends Proxy {
  /**
   * @param {string|{getConnectionString(): string}} upstream the database: a
   *   mongodb:// URI, or a started container that gives one (startDatabase's,
   *   @testcontainers/mongodb's)
   * @param {object} [options]
   * @param {string} [options.image] the wirelint image (default wirelint:VERSION, this package's version)
   * @param {string} [options.report] where the JSON report is copied when wirelint stops (default: a temporary directory)
   * @param {string} [options.config] a wirelint.toml, mounted into the container
   * @param {string[]} [options.args] further `wirelint proxy` arguments
   * @param {number} [options.startupTimeout] milliseconds to wait for it to listen (60 000)
   * @param {number} [options.stopTimeout] milliseconds it has to write its report after SIGTERM (30 000)
   * @param {string} [options.root] where to look for the testcontainers package (default: the working directory)
   */
  constructor(upstream, options = {}) {
    const uri = typeof upstream === "string" ? upstream : upstream && upstream.getConnectionString();
    if (typeof uri !== "string") {
      throw new TypeError("the upstream is a mongodb:// URI or a started container with getConnectionString()");
    }
    super(uri, { ...options, startupTimeout: options.startupTimeout || 60000 });
    this.image = options.image || WIRELINT_IMAGE;
    this.stopTimeout = options.stopTimeout || 30000;
    this.root = options.root || process.cwd();
    /** Where the container writes the report (the mounted directory). */
    this.written = path.join(this.dir, "report.json");
    /** The started container, while it runs. */
    this.container = null;
    this._log = collector();
    this._listener = null;
  }

  /** Starts the container and waits until wirelint listens; resolves to the URI to use. */
  async start() {
    const { GenericContainer, Wait } = load(this.root);
    // The image runs as its own user: it writes the report here.
    fs.chmodSync(this.dir, 0o777);
    const command = [
      "proxy",
      "--listen",
      "127.0.0.1:0",
      "--admin",
      "127.0.0.1:0",
      "--report",
      `${OUT}/report.json`,
      "--report-interval",
      "5s",
    ];
    const mounts = [{ source: this.dir, target: OUT, mode: "rw" }];
    if (this.config) {
      mounts.push({ source: path.resolve(this.config), target: CONFIG, mode: "ro" });
      command.push("--config", CONFIG);
    }
    command.push(...this.args);
    const container = new GenericContainer(this.image)
      .withNetworkMode("host")
      .withCommand(command)
      .withEnvironment({
        WIRELINT_UPSTREAM: this.upstream,
        RUST_LOG: process.env.RUST_LOG || "wirelint=info,warn",
      })
      .withBindMounts(mounts)
      .withStartupTimeout(this.startupTimeout)
      .withLogConsumer(this._log.consume)
      .withWaitStrategy(Wait.forLogMessage(LISTENING));
    try {
      this.container = await container.start();
    } catch (e) {
      throw new Error(`the wirelint container (${this.image}) did not start: ${firstLine(e)}\n${this.log()}`);
    }
    this._listener = removeOnExit(this.container.getId());
    // The wait read its own copy of the log: ours may lag a little.
    const deadline = Date.now() + 5000;
    while (!LISTENING.test(this.log()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const found = LISTENING.exec(this.log());
    if (!found) {
      await this.stop().catch(() => {});
      throw new Error(`the wirelint container said where it listens, but its log did not arrive:\n${this.log()}`);
    }
    const admin = ADMIN.exec(this.log());
    this.admin = admin ? admin[1] : null;
    this.address = found[1];
    this.uri = clientUri(this.upstream, this.address);
    return this.uri;
  }

  /** What the container wrote on stdout and stderr so far. */
  log() {
    return this._log.text;
  }

  /**
   * Stops the container gracefully (SIGTERM: wirelint writes its final
   * report within stopTimeout), removes it, and resolves to the report.
   */
  async stop() {
    if (this.container) {
      const container = this.container;
      this.container = null;
      try {
        await container.stop({ timeout: this.stopTimeout });
      } finally {
        process.removeListener("exit", this._listener);
      }
    }
    if (!fs.existsSync(this.written)) {
      // Never started, or killed before it wrote one: not an older report
      // at reportPath.
      throw new Error(`wirelint wrote no report (${this.written})`);
    }
    if (this.reportPath !== this.written) {
      fs.mkdirSync(path.dirname(this.reportPath), { recursive: true });
      fs.copyFileSync(this.written, this.reportPath);
    }
    return this.report();
  }
}

module.exports = {
  FERRETDB_IMAGE,
  WIRELINT_IMAGE,
  MissingTestcontainers,
  StartedDatabase,
  WirelintContainer,
  freePort,
  load,
  startDatabase,
};
