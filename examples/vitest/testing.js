// What both test files share: a client on MONGODB_URI (the variable the
// suite reads its database from, as it would without wirelint), a seeded
// database, and a way to call a route handler as Express would.

import { MongoClient } from "mongodb";
import { routes } from "./blog.js";

const AUTHORS = ["ada", "grace", "linus", "barbara", "edsger"];

/** Connects, seeds `name` with five users and ten posts; resolves to { client, db, app }. */
export async function seeded(name) {
  const client = new MongoClient(process.env.MONGODB_URI);
  const db = client.db(name);
  await db.collection("posts").drop().catch(() => {});
  await db.collection("users").drop().catch(() => {});
  const { insertedIds } = await db.collection("users").insertMany(AUTHORS.map((n) => ({ name: n, joined: 2024 })));
  const posts = [];
  for (let i = 0; i < 10; i++) {
    posts.push({ author_id: insertedIds[i % AUTHORS.length], title: `Post ${i}`, body: "…", tags: ["news"] });
  }
  await db.collection("posts").insertMany(posts);
  return { client, db, app: routes(db) };
}

/** Calls a route handler with `req.query`; resolves to [status, body]. */
export async function get(handler, query = {}) {
  let status = 200;
  let body;
  const res = {
    status(code) {
      status = code;
      return res;
    },
    json(value) {
      body = value;
      return res;
    },
  };
  await handler({ query }, res);
  return [status, body];
}
