import blog


def test_create_and_read_a_post(db):
    author = blog.create_user(db, "ada")
    post_id = blog.create_post(db, author, "Hello", "First post")
    post = blog.get_post(db, post_id)
    assert post["title"] == "Hello"
    assert post["author_id"] == author


def test_rename_a_post(db):
    author = blog.create_user(db, "grace")
    post_id = blog.create_post(db, author, "Draft", "…")
    assert blog.rename_post(db, post_id, "Final") == 1
    assert blog.get_post(db, post_id)["title"] == "Final"


def test_latest_posts_come_newest_first(db):
    author = blog.create_user(db, "linus")
    ids = [blog.create_post(db, author, f"Post {i}", "…") for i in range(5)]
    titles = [p["title"] for p in blog.latest_posts(db, limit=3)]
    assert titles == ["Post 4", "Post 3", "Post 2"]
    assert len(ids) == 5
