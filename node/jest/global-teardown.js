"use strict";
// Jest globalTeardown: stops wirelint (it writes its final report), prints
// the access-pattern table and the findings, writes the SARIF and JUnit XML
// files when asked, and fails the run when a finding reaches failOn. It
// prints on stderr, where Jest prints its own summary, so the two stay in
// order. A tripped gate sets the exit status instead of throwing, so Jest
// still writes --json --outputFile and watch mode runs again.

const runner = require("../lib/runner");

module.exports = async function wirelintGlobalTeardown() {
  try {
    await runner.finish(undefined, (text) => process.stderr.write(text));
  } catch (e) {
    if (!(e instanceof runner.FindingsError)) throw e;
    process.stderr.write(`\n${e.stack}\n`);
    process.exitCode = 1;
  }
};
