// wirelint starts before the tests and stops after them; its options are
// in package.json ("wirelint").
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globalSetup: ["wirelint/vitest"],
  },
});
