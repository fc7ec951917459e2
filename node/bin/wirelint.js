#!/usr/bin/env node
"use strict";
// `wirelint` on the command line (npx wirelint, package.json scripts): runs
// the binary this package carries ($WIRELINT_BINARY instead, when set) with
// the same arguments and stdio, passes on the signals it gets, and exits
// as it did.

const { spawn } = require("node:child_process");
const { binary } = require("../lib/index");

let exe;
try {
  exe = binary();
} catch (e) {
  process.stderr.write(`wirelint: ${e.message}\n`);
  process.exit(127);
}

// The handlers come before the binary starts: a signal that arrived
// between the two would otherwise end this process the default way and
// leave the binary running, orphaned, holding our stdout.
const signals = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];
let child = null;
const forward = (signal) => child && child.kill(signal);
for (const signal of signals) process.on(signal, forward);
child = spawn(exe, process.argv.slice(2), { stdio: "inherit" });

child.on("error", (err) => {
  process.stderr.write(`wirelint: cannot run ${exe}: ${err.message}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so that whoever waits on us sees it.
    for (const s of signals) process.removeListener(s, forward);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code);
});
