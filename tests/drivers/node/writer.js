// Inserts numbered documents one at a time for SECONDS through URI into
// db.COLL (retryable writes on, a short heartbeat) and prints as JSON the
// _ids the server acknowledged and the wall-clock time of each error. Run by
// tests/failover.rs across a primary stepdown.
//   node writer.js URI DB COLL SECONDS
'use strict';
const { MongoClient } = require('mongodb');

async function main(uri, db, collName, seconds) {
  const client = new MongoClient(uri, {
    retryWrites: true,
    serverSelectionTimeoutMS: 10000,
    heartbeatFrequencyMS: 500,
  });
  const coll = client.db(db).collection(collName);
  const acked = [];
  const errors = [];
  let n = 0;
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    try {
      await coll.insertOne({ _id: n });
      acked.push(n);
    } catch (e) {
      if (e.code === 11000) {
        // Applied by an attempt whose answer was lost: stored once.
        acked.push(n);
      } else {
        errors.push({ at: Date.now() / 1000, error: String(e.message).slice(0, 200) });
      }
    }
    n += 1;
    await new Promise((r) => setTimeout(r, 10));
  }
  await client.close();
  console.log(JSON.stringify({ acked, errors, tried: n }));
}

main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5])).catch((e) => {
  console.error(e);
  process.exit(1);
});
