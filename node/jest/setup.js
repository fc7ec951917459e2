"use strict";
// Jest setupFilesAfterEnv, added by wirelint/jest/global-setup: names this
// worker's clients apart and tells wirelint which test runs, so that
// findings name the tests whose operations showed them.

const { install } = require("../lib/tests");

/** The running test's own title, from Jest's test runner (jest-circus). */
function title() {
  const key = Object.getOwnPropertySymbols(globalThis).find((s) => s.description === "JEST_STATE_SYMBOL");
  const state = key && globalThis[key];
  const test = state && state.currentlyRunningTest;
  return test ? test.name : null;
}

install({
  beforeEach,
  afterEach,
  current: () => {
    const state = expect.getState();
    return { name: state.currentTestName, file: state.testPath, title: title() };
  },
  worker: `wirelint-jest-${process.env.JEST_WORKER_ID || "1"}`,
});
