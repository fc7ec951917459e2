"use strict";
// Jest globalSetup: starts wirelint in front of the suite's database and
// points the suite's variable (MONGODB_URI unless told otherwise) at it
// before any test file runs. Pair it with wirelint/jest/global-teardown.
//
//   // jest.config.js
//   module.exports = {
//     globalSetup: "wirelint/jest/global-setup",
//     globalTeardown: "wirelint/jest/global-teardown",
//   };

const runner = require("../lib/runner");

module.exports = async function wirelintGlobalSetup(globalConfig, projectConfig) {
  const root = (projectConfig && projectConfig.rootDir) || (globalConfig && globalConfig.rootDir) || process.cwd();
  await runner.start(root);
};
