"""A small blog's data access, the way many applications start: posts
reference their author by id."""

from bson import ObjectId


def create_user(db, name):
    return db.users.insert_one({"name": name, "joined": 2024}).inserted_id


def create_post(db, author_id, title, body):
    doc = {"author_id": author_id, "title": title, "body": body, "tags": ["news"]}
    return db.posts.insert_one(doc).inserted_id


def get_post(db, post_id):
    return db.posts.find_one({"_id": ObjectId(post_id)})


def rename_post(db, post_id, title):
    return db.posts.update_one({"_id": post_id}, {"$set": {"title": title}}).modified_count


def latest_posts(db, limit=10):
    """The front page: the latest posts, without their bodies."""
    return list(db.posts.find({}, {"title": 1, "author_id": 1}).sort("_id", -1).limit(limit))


def front_page_with_authors(db, limit=10):
    """The front page with each author's name — one query per post for the
    author: the N+1 pattern."""
    page = latest_posts(db, limit)
    for post in page:
        author = db.users.find_one({"_id": post["author_id"]})
        post["author"] = author["name"]
    return page
