// Vitest setupFiles, added by wirelint/vitest: names this worker's clients
// apart and tells wirelint which test runs, so that findings name the
// tests whose operations showed them.

import { afterEach, beforeEach, expect } from "vitest";
import tests from "../lib/tests.js";

tests.install({
  beforeEach,
  afterEach,
  current: (context) => {
    const task = context && context.task;
    const state = expect.getState();
    return {
      name: state.currentTestName,
      file: state.testPath || (task && task.file && task.file.filepath),
      title: task ? task.name : null,
    };
  },
  worker: `wirelint-vitest-${process.env.VITEST_POOL_ID || "1"}`,
});
