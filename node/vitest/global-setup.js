"use strict";
// Vitest globalSetup: starts wirelint in front of the suite's database and
// points the suite's variable (MONGODB_URI unless told otherwise) at it
// before the test files run; at the end stops it, prints the access-pattern
// table and the findings, writes the SARIF file when asked, and fails the
// run when a finding reaches failOn. In watch mode the findings so far are
// printed after every run (the watch goes on whatever they are).
//
//   // vitest.config.js
//   export default { test: { globalSetup: ["wirelint/vitest"] } };

const runner = require("../lib/runner");

const SETUP = require.resolve("./setup.mjs");

async function setup(project) {
  const root = (project && project.config && project.config.root) || process.cwd();
  const state = await runner.start(root);
  // Every test file tells wirelint which test runs (the configuration is
  // handed to the workers after the global setup).
  const files = project && project.config && project.config.setupFiles;
  if (Array.isArray(files) && !files.includes(SETUP)) files.push(SETUP);
  // Watch mode: the teardown comes only when Vitest closes. A reporter of
  // ours prints the findings after each run (Vitest adds reporters of its
  // own this way).
  const vitest = project && project.vitest;
  if (vitest && vitest.config && vitest.config.watch && Array.isArray(vitest.reporters)) {
    vitest.reporters.push({
      onTestRunEnd: () => runner.live(state).catch((e) => process.stderr.write(`wirelint: ${e.message}\n`)),
    });
  }
  return async function teardown() {
    try {
      await runner.finish(state);
    } catch (e) {
      // Vitest logs an error thrown here but keeps the exit status: set it.
      if (!process.exitCode) process.exitCode = 1;
      if (!(e instanceof runner.FindingsError)) throw e;
      process.stderr.write(`\n${e.stack}\n`);
    }
  };
}

module.exports = setup;
module.exports.default = setup;
