"use strict";
// A small blog service: Express-style route handlers (req, res) over the
// official MongoDB driver. Posts reference their author by id.
//
// The front page shows each post's author. By default it fetches them the
// way many applications start: one findOne per post (N+1). With
// BLOG_AUTHORS=batched it fetches them all with one $in query.

const { ObjectId } = require("mongodb");

function routes(db) {
  const posts = db.collection("posts");
  const users = db.collection("users");

  function limitOf(req) {
    const n = Number.parseInt((req.query && req.query.limit) || "10", 10);
    return Number.isFinite(n) && n > 0 ? Math.min(n, 50) : 10;
  }

  /** The latest posts, title and author id only. */
  function latest(limit) {
    return posts
      .find({}, { projection: { title: 1, author_id: 1 } })
      .sort({ _id: -1 })
      .limit(limit)
      .toArray();
  }

  return {
    /** GET /posts: the latest posts, projected and limited. */
    async listPosts(req, res) {
      const page = await latest(limitOf(req));
      res.json(page.map((p) => ({ id: p._id.toHexString(), title: p.title })));
    },

    /** GET /: the front page, each post with its author's name. */
    async frontPage(req, res) {
      const page = await latest(limitOf(req));
      let names;
      if (process.env.BLOG_AUTHORS === "batched") {
        const ids = [...new Set(page.map((p) => p.author_id.toHexString()))].map((id) => new ObjectId(id));
        const authors = await users.find({ _id: { $in: ids } }, { projection: { name: 1 } }).toArray();
        const byId = new Map(authors.map((a) => [a._id.toHexString(), a.name]));
        names = page.map((p) => byId.get(p.author_id.toHexString()));
      } else {
        names = [];
        for (const post of page) {
          const author = await users.findOne({ _id: post.author_id });
          names.push(author.name);
        }
      }
      res.json(page.map((p, i) => ({ title: p.title, author: names[i] })));
    },
  };
}

module.exports = { routes };
