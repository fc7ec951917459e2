"use strict";
// What the Jest and Vitest per-file setups share: in each test worker,
// name this worker's clients apart (appName on the URI the suite reads)
// and tell wirelint, before each test, which test runs, so that findings
// name the tests whose operations showed them. The global setup leaves
// wirelint's admin address and the variable's name in the environment.

const fs = require("node:fs");
const path = require("node:path");
const { mark, withAppName } = require("./index");

/** Where the global setup leaves wirelint's admin endpoints' address. */
const ADMIN = "WIRELINT_RUN_ADMIN";
/** Where it leaves the name of the variable the suite reads its URI from. */
const VARIABLE = "WIRELINT_RUN_VARIABLE";

const sources = new Map();

/**
 * The line of `file` that defines the test titled `title` (the first line
 * with the title quoted), or null. Without its own title, the longest
 * ending of the full name `name` (describe blocks first) found quoted.
 */
function lineOf(file, title, name = null) {
  if (!title && name) {
    const words = name.split(" ");
    for (let i = 0; i < words.length; i++) {
      const found = lineOf(file, words.slice(i).join(" "));
      if (found) return found;
    }
    return null;
  }
  if (!file || !title) return null;
  let lines = sources.get(file);
  if (lines === undefined) {
    try {
      lines = fs.readFileSync(file, "utf8").split("\n");
    } catch {
      lines = null;
    }
    sources.set(file, lines);
  }
  if (!lines) return null;
  const quoted = [`"${title}"`, `'${title}'`, `\`${title}\``];
  const i = lines.findIndex((l) => quoted.some((q) => l.includes(q)));
  return i >= 0 ? i + 1 : null;
}

/**
 * Installs the hooks: `beforeEach`/`afterEach` are the runner's, `current`
 * (given the hook's arguments) returns `{ name, file, title }` for the test
 * about to run (its full name, its file's absolute path, its own title),
 * `worker` names this worker.
 */
function install({ beforeEach, afterEach, current, worker }) {
  const admin = process.env[ADMIN];
  if (!admin) return; // wirelint's global setup did not run
  const variable = process.env[VARIABLE];
  if (variable && process.env[variable]) {
    // Before the test file is loaded: the clients it makes give this name.
    process.env[variable] = withAppName(process.env[variable], worker);
  }
  let failed = false;
  const tell = async (test) => {
    if (failed) return;
    try {
      await mark(admin, { ...test, worker });
    } catch (e) {
      failed = true;
      process.stderr.write(`wirelint could not be told which test runs (${e.message}); findings name no test\n`);
    }
  };
  // Rest parameters: Jest passes a callback to a hook that declares one.
  beforeEach(async (...args) => {
    const { name, file, title } = current(...args);
    const relative = file ? path.relative(process.cwd(), file).split(path.sep).join("/") : null;
    await tell({
      test: relative ? `${relative} > ${name}` : name,
      file: relative,
      line: lineOf(file, title, name),
    });
  });
  afterEach(async () => tell({}));
}

module.exports = { ADMIN, VARIABLE, install, lineOf };
