// wirelint starts before the tests and stops after them; its options are
// in package.json ("wirelint").
module.exports = {
  testEnvironment: "node",
  globalSetup: "wirelint/jest/global-setup",
  globalTeardown: "wirelint/jest/global-teardown",
};
