"use strict";
// Jest globalSetup: starts wirelint in front of the suite's database and
// points the suite's variable (MONGODB_URI unless told otherwise) at it
// before any test file runs; adds wirelint/jest/setup to every test file,
// which tells wirelint which test runs. Pair it with
// wirelint/jest/global-teardown.
//
//   // jest.config.js
//   module.exports = {
//     globalSetup: "wirelint/jest/global-setup",
//     globalTeardown: "wirelint/jest/global-teardown",
//   };

const runner = require("../lib/runner");

const SETUP = require.resolve("./setup");

module.exports = async function wirelintGlobalSetup(globalConfig, projectConfig) {
  const teardown = (projectConfig && projectConfig.globalTeardown) || (globalConfig && globalConfig.globalTeardown);
  if (!teardown) {
    // Without it wirelint's findings would never be read: the run would
    // pass saying nothing, whatever the traffic.
    throw new runner.UsageError(
      'wirelint/jest/global-setup runs without its teardown: add globalTeardown: "wirelint/jest/global-teardown" ' +
        "to the Jest configuration (it stops wirelint, prints the findings and applies failOn). No test was run",
    );
  }
  const root = (projectConfig && projectConfig.rootDir) || (globalConfig && globalConfig.rootDir) || process.cwd();
  await runner.start(root);
  // Every test file tells wirelint which test runs (the configuration is
  // handed to the workers after the global setup).
  if (projectConfig && Array.isArray(projectConfig.setupFilesAfterEnv) && !projectConfig.setupFilesAfterEnv.includes(SETUP)) {
    projectConfig.setupFilesAfterEnv.push(SETUP);
  }
};
