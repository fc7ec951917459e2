// Runs a Node driver (or Mongoose) application as if it set no `comment`:
// loaded with `node --require`, it takes `comment` out of every command the
// driver sends, before encoding, so the bytes on the wire are those the
// driver sends for an application that names nothing. (wirelint's
// tagged-equals-untagged tests; not a wirelint switch.)
'use strict';
const { Connection } = require('mongodb/lib/cmap/connection');
const command = Connection.prototype.command;
Connection.prototype.command = function (ns, cmd, options, responseType) {
  if (cmd && typeof cmd === 'object' && 'comment' in cmd) {
    delete cmd.comment;
  }
  return command.call(this, ns, cmd, options, responseType);
};
