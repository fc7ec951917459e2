"use strict";
// What the Jest and Vitest global setups share: read the options, start
// wirelint in front of the suite's database and repoint the variable the
// suite reads its URI from; at the end stop it, print what it saw, write
// the files asked for, and say whether the run fails.

const fs = require("node:fs");
const path = require("node:path");
const { Proxy, SEVERITIES, request, worst } = require("./index");
const tests = require("./tests");
const containers = require("./testcontainers");

/** The options: their key in package.json's "wirelint" object, their variable. */
const OPTIONS = [
  { key: "env", variable: "WIRELINT_ENV", what: "the environment variable the suite reads its MongoDB URI from (default MONGODB_URI)" },
  { key: "upstream", variable: "WIRELINT_UPSTREAM", what: "the database to run wirelint in front of (default: the value of that variable)" },
  { key: "failOn", variable: "WIRELINT_FAIL_ON", what: `fail the run when a finding at or above this level exists: ${SEVERITIES.join(", ")}` },
  { key: "report", variable: "WIRELINT_REPORT", what: "write the JSON report here" },
  { key: "sarif", variable: "WIRELINT_SARIF", what: "write the findings as SARIF 2.1.0 here" },
  { key: "junit", variable: "WIRELINT_JUNIT", what: "write the findings as JUnit XML here (for CI test views), one test case each" },
  { key: "config", variable: "WIRELINT_CONFIG", what: "a wirelint.toml (partition keys, rule thresholds)" },
  { key: "image", variable: "WIRELINT_IMAGE", what: `the database image started when there is no upstream (default ${containers.FERRETDB_IMAGE})` },
  { key: "proxyImage", variable: "WIRELINT_PROXY_IMAGE", what: `the wirelint image run in front of that database (default ${containers.WIRELINT_IMAGE})` },
  { key: "showValues", variable: "WIRELINT_SHOW_VALUES", what: "let findings carry example values from the traffic (true/false, default false)" },
];
const KEYS = OPTIONS.map((o) => o.key);
const STATE = Symbol.for("wirelint.runner");

/** A mistake in the options: the run stops before the tests. */
class UsageError extends Error {
  constructor(message) {
    super(message);
    this.name = "wirelint usage error";
    // The message is the whole story: no stack trace under it.
    this.stack = `${this.name}: ${message}`;
  }
}

/** The run fails on its findings (every test may have passed). */
class FindingsError extends Error {
  constructor(message) {
    super(message);
    this.name = "wirelint";
    this.stack = `${this.name}: ${message}`;
  }
}

/** An error whose message says all: printed without a stack trace. */
function plain(message) {
  const e = new Error(message);
  e.stack = message;
  return e;
}

/** The nearest package.json from `dir` up, as [path, parsed] or null. */
function nearestPackageJson(dir) {
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    const file = path.join(d, "package.json");
    if (fs.existsSync(file)) {
      try {
        return [file, JSON.parse(fs.readFileSync(file, "utf8"))];
      } catch (e) {
        throw new UsageError(`${file} is not valid JSON: ${e.message}`);
      }
    }
    if (path.dirname(d) === d) return null;
  }
}

/**
 * The options, validated: the `WIRELINT_*` variables first, then the
 * "wirelint" object of the project's package.json. Relative paths are
 * taken from the project's root. Throws a UsageError naming the option.
 */
function loadOptions(root, env = process.env) {
  root = path.resolve(root || process.cwd());
  const found = nearestPackageJson(root);
  let fromFile = {};
  let where = "package.json";
  if (found && found[1] && found[1].wirelint !== undefined) {
    where = `${found[0]} "wirelint"`;
    fromFile = found[1].wirelint;
    if (fromFile === null || typeof fromFile !== "object" || Array.isArray(fromFile)) {
      throw new UsageError(`${where} must be an object with the keys ${KEYS.join(", ")}`);
    }
    for (const key of Object.keys(fromFile)) {
      if (!KEYS.includes(key)) {
        throw new UsageError(`${where}: unknown option "${key}"; the options are ${KEYS.join(", ")}`);
      }
    }
  }

  const options = { root };
  const sources = {};
  for (const { key, variable } of OPTIONS) {
    let value;
    let source;
    // An empty WIRELINT_FAIL_ON= (or "off") switches off a failOn set in
    // package.json: a way to let one run report without failing.
    if (key === "failOn" && env[variable] !== undefined && /^(|off|none)$/i.test(env[variable].trim())) {
      continue;
    }
    if (env[variable] !== undefined && env[variable] !== "") {
      value = env[variable];
      source = variable;
    } else if (fromFile[key] !== undefined) {
      value = fromFile[key];
      source = `${where}.${key}`;
    } else {
      continue;
    }
    options[key] = check(key, value, source);
    sources[key] = source;
  }
  options.env = options.env || "MONGODB_URI";
  for (const key of ["report", "sarif", "junit", "config"]) {
    if (options[key]) options[key] = path.resolve(root, options[key]);
  }
  if (options.config && !fs.existsSync(options.config)) {
    throw new UsageError(`${sources.config}: no such file: ${options.config}`);
  }
  return options;
}

function check(key, value, source) {
  if (key === "showValues") {
    if (typeof value === "boolean") return value;
    if (typeof value === "string" && /^(true|1|yes|on)$/i.test(value)) return true;
    if (typeof value === "string" && /^(false|0|no|off)$/i.test(value)) return false;
    throw new UsageError(`${source} must be true or false, not ${JSON.stringify(value)}`);
  }
  if (typeof value !== "string" || value.trim() === "") {
    throw new UsageError(`${source} must be a non-empty string, not ${JSON.stringify(value)}`);
  }
  if (key === "failOn" && !SEVERITIES.includes(value)) {
    throw new UsageError(`${source} must be one of ${SEVERITIES.join(", ")}, not ${JSON.stringify(value)}`);
  }
  if (key === "env" && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(value)) {
    throw new UsageError(`${source} must be an environment variable's name, not ${JSON.stringify(value)}`);
  }
  if (key === "upstream" && !/^mongodb(\+srv)?:\/\//.test(value)) {
    throw new UsageError(`${source} must be a mongodb:// or mongodb+srv:// connection string`);
  }
  return value;
}

/**
 * Starts the database container (`image`) with Testcontainers; resolves
 * to the started database (its state.container).
 */
async function startDatabase(options, state) {
  const image = options.image || containers.FERRETDB_IMAGE;
  try {
    containers.load(options.root);
  } catch (e) {
    if (!(e instanceof containers.MissingTestcontainers)) throw e;
    throw new UsageError(
      `no database to run in front of: ${options.env} is not set. Set it to your test database's URI ` +
        `(or set WIRELINT_UPSTREAM, or "upstream" in package.json "wirelint"), or ` +
        "`npm install --save-dev testcontainers` to have a database container started (needs a Docker engine). No test was run",
    );
  }
  try {
    state.container = await containers.startDatabase(image, { root: options.root });
  } catch (e) {
    throw new UsageError(
      `no database to run in front of: ${options.env} is not set, and the database container (${image}) ` +
        `could not be started — is a Docker engine running, and is the image there? (${String((e && e.message) || e).split("\n")[0]}). ` +
        "No test was run",
    );
  }
  return state.container;
}

/**
 * Starts wirelint for a run and points the suite's variable at it.
 * Resolves to the state `finish` takes.
 */
async function start(root) {
  const options = loadOptions(root);
  const state = { options, proxy: null, container: null, previous: process.env[options.env] };
  const upstream = options.upstream || process.env[options.env];
  const args = options.showValues ? ["--show-values"] : [];
  const settings = { report: options.report, config: options.config, args };
  if (upstream) {
    check("upstream", upstream, options.upstream ? "upstream" : options.env);
    state.proxy = new Proxy(upstream, settings);
  } else {
    // No database: one in a container, and wirelint in another.
    const database = await startDatabase(options, state);
    state.proxy = new containers.WirelintContainer(database, { ...settings, image: options.proxyImage, root: options.root });
  }
  try {
    process.env[options.env] = await state.proxy.start();
  } catch (e) {
    state.proxy.cleanup();
    await stopContainer(state);
    throw plain(`wirelint did not start: ${e.message}`);
  }
  // Before any test: a database that does not answer stops the run with
  // wirelint's message, not with a test's timeout.
  const down = await state.proxy.checkUpstream();
  if (down) {
    await state.proxy.stop().catch(() => {});
    // No test ran: no report of nothing left behind.
    fs.rmSync(state.proxy.reportPath, { force: true });
    state.proxy.cleanup();
    await stopContainer(state);
    restore(state);
    throw plain(`wirelint: the database does not answer through wirelint: ${down}. No test was run`);
  }
  // For the per-file setup in each worker (see tests.js).
  process.env[tests.ADMIN] = state.proxy.admin || "";
  process.env[tests.VARIABLE] = options.env;
  globalThis[STATE] = state;
  return state;
}

/** Puts the suite's variable back as it was, and forgets the workers' hand-off. */
function restore(state) {
  const { options } = state;
  if (state.previous === undefined) delete process.env[options.env];
  else process.env[options.env] = state.previous;
  delete process.env[tests.ADMIN];
  delete process.env[tests.VARIABLE];
}

async function stopContainer(state) {
  if (state.container) {
    const container = state.container;
    state.container = null;
    await container.stop();
  }
}

/** What to say when wirelint saw no data operation in a run. */
function sawNothing(options) {
  return (
    "wirelint saw no data operations: no test's database traffic went through it, so the findings say " +
    `nothing about this suite. Likely causes: the suite builds its client from a URI of its own, not ${options.env} ` +
    "(set the wirelint env option to the variable it reads); the client is created before the global setup " +
    "repoints the variable; or no test touches the database."
  );
}

/**
 * Stops wirelint, prints the findings and the access-pattern table, writes
 * the SARIF file when asked, and throws a FindingsError when a finding
 * reaches failOn. `write` prints (default: stdout).
 */
async function finish(state = globalThis[STATE], write = (text) => process.stdout.write(text)) {
  if (!state || !state.proxy) return;
  if (globalThis[STATE] === state) delete globalThis[STATE];
  const { options, proxy } = state;
  restore(state);
  let report;
  try {
    report = await proxy.stop();
  } catch (e) {
    throw plain(`wirelint wrote no report (${e.message}); its log:\n${proxy.log()}`);
  } finally {
    await stopContainer(state);
  }
  try {
    write(`\n── wirelint ──\n${proxy.render("text")}`);
    if (options.sarif) {
      fs.mkdirSync(path.dirname(options.sarif), { recursive: true });
      fs.writeFileSync(options.sarif, proxy.render("sarif"));
    }
    if (options.junit) {
      fs.mkdirSync(path.dirname(options.junit), { recursive: true });
      fs.writeFileSync(options.junit, proxy.render("junit", options.failOn || null));
    }
  } finally {
    // Rendered: nothing left in the temporary directory.
    proxy.cleanup();
  }
  const where = [`report: ${proxy.reportPath}`];
  if (options.sarif) where.push(`SARIF: ${options.sarif}`);
  if (options.junit) where.push(`JUnit XML: ${options.junit}`);
  const findings = report.findings || [];
  write(`wirelint: ${findings.length} finding(s); ${where.join(", ")}\n`);
  if (((report.counters || {}).operations || 0) === 0) {
    const message = sawNothing(options);
    if (options.failOn) throw new FindingsError(`${message} The run fails: failOn is ${options.failOn}.`);
    write(`wirelint: ${message}\n`);
  }
  const found = worst(report);
  if (options.failOn && found && SEVERITIES.indexOf(found) >= SEVERITIES.indexOf(options.failOn)) {
    throw new FindingsError(`a finding of severity ${found} reached failOn ${options.failOn}: the run fails`);
  }
}

/**
 * Prints the findings so far, read live from the running wirelint (watch
 * modes: after each run, with the gate's verdict; nothing stops).
 */
async function live(state = globalThis[STATE], write = (text) => process.stdout.write(text)) {
  if (!state || !state.proxy || !state.proxy.admin) return;
  const { options, proxy } = state;
  const { status, body } = await request(proxy.admin, "GET", "/report", null, 30000);
  if (status !== 200) throw new Error(`the live report: HTTP ${status}`);
  const file = path.join(proxy.dir, "live-report.json");
  fs.writeFileSync(file, body);
  write(`\n── wirelint (since the watch started) ──\n${proxy.render("text", null, file)}`);
  const found = worst(JSON.parse(body));
  if (options.failOn && found && SEVERITIES.indexOf(found) >= SEVERITIES.indexOf(options.failOn)) {
    write(`wirelint: a finding of severity ${found} reached failOn ${options.failOn} (watch mode: the run would fail)\n`);
  }
}

module.exports = { OPTIONS, UsageError, FindingsError, loadOptions, start, finish, live };
