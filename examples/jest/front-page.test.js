// What wirelint should find in this suite, written before running it:
//
// - the front page (GET /, this file) fetches each post's author with its
//   own findOne by _id: WL401 n-plus-one, severity warning, on the
//   namespace blog_jest.users. With failOn "warning" (package.json) the
//   run fails although every test passes.
// - the post list (GET /posts, posts.test.js) is one projected, sorted,
//   limited find: nothing.
// - with BLOG_AUTHORS=batched the front page reads the authors with one
//   $in query: nothing at all, and the run passes.
//
// Seen when run against FerretDB: WL401 as expected, and on some runs also
// WL402 chatty-request on the front page's own pattern (blog_jest.posts,
// "follows from WL401"): the same N+1 seen as too many operations per
// request. Nothing on the post list; nothing with BLOG_AUTHORS=batched.

const { seeded, get } = require("./testing");

let client;
let app;

beforeAll(async () => {
  ({ client, app } = await seeded("blog_jest"));
});

afterAll(() => client.close());

test("the front page names every author, newest first", async () => {
  for (let i = 0; i < 4; i++) {
    // the page is shown a few times
    const [status, page] = await get(app.frontPage, { limit: "5" });
    expect(status).toBe(200);
    expect(page.map((p) => p.author)).toEqual(["edsger", "barbara", "linus", "grace", "ada"]);
    expect(page.map((p) => p.title)).toEqual(["Post 9", "Post 8", "Post 7", "Post 6", "Post 5"]);
  }
});
