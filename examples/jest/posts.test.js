// The post list (GET /posts): one projected, sorted, limited find, nothing
// for wirelint to report (see front-page.test.js).

const { seeded, get } = require("./testing");

let client;
let app;

beforeAll(async () => {
  ({ client, app } = await seeded("blog_jest_posts"));
});

afterAll(() => client.close());

test("the post list is the latest ten, titles only", async () => {
  const [status, page] = await get(app.listPosts);
  expect(status).toBe(200);
  expect(page).toHaveLength(10);
  expect(page[0]).toEqual({ id: expect.any(String), title: "Post 9" });
});

test("the post list honours ?limit", async () => {
  const [, page] = await get(app.listPosts, { limit: "3" });
  expect(page.map((p) => p.title)).toEqual(["Post 9", "Post 8", "Post 7"]);
});
