"use strict";
// Jest globalTeardown: stops wirelint (it writes its final report), prints
// the access-pattern table and the findings, writes the SARIF file when
// asked, and fails the run when a finding reaches failOn. It prints on
// stderr, where Jest prints its own summary, so the two stay in order.

const runner = require("../lib/runner");

module.exports = async function wirelintGlobalTeardown() {
  await runner.finish(undefined, (text) => process.stderr.write(text));
};
