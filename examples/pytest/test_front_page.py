"""The front page shows each post's author: `front_page_with_authors` gets
them one query per post (N+1). wirelint reports it (WL401) and, with
--wirelint-fail-on=warning, fails the session although the test passes."""

import blog


def test_front_page_names_every_author(db):
    authors = [blog.create_user(db, name) for name in ("ada", "grace", "linus", "barbara", "edsger")]
    for i in range(10):
        blog.create_post(db, authors[i % len(authors)], f"Post {i}", "…")
    for _ in range(4):  # the page is shown a few times
        page = blog.front_page_with_authors(db, limit=5)
        assert [p["author"] for p in page] == ["edsger", "barbara", "linus", "grace", "ada"]
