// Node driver scenario run by tests/drivers.rs, directly and through
// wirelint; the test compares what it prints.
//   node scenario.js URI DB
'use strict';
const { MongoClient } = require('mongodb');

async function main(uri, dbName) {
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 10000 });
  try {
    const coll = client.db(dbName).collection('items');
    await coll.drop().catch(() => {});
    const out = {};
    await coll.insertMany(Array.from({ length: 50 }, (_, i) => ({ _id: i, group: i % 5, name: `n${i}` })));
    out.findOne = await coll.findOne({ _id: 7 });
    out.update = (await coll.updateMany({ group: 2 }, { $set: { flag: true } })).modifiedCount;
    out.del = (await coll.deleteOne({ _id: 9 })).deletedCount;
    out.cursor = (await coll.find({}).batchSize(7).sort({ _id: 1 }).toArray()).map((d) => d._id);
    out.agg = await coll.aggregate([{ $group: { _id: '$group', n: { $sum: 1 } } }, { $sort: { _id: 1 } }]).toArray();
    try {
      await coll.insertMany([{ _id: 500 }, { _id: 500 }]);
    } catch (e) {
      out.dup = e.code;
    }
    console.log(JSON.stringify(out));
  } finally {
    await client.close();
  }
}

main(process.argv[2], process.argv[3]).catch((e) => {
  console.error(e);
  process.exit(1);
});
