import pymongo
import pytest


@pytest.fixture(scope="session")
def client(wirelint_uri):
    """The suite's client: wirelint's URI instead of the database's (the
    plugin's `wirelint_uri` fixture)."""
    client = pymongo.MongoClient(wirelint_uri)
    yield client
    client.close()


@pytest.fixture
def db(client):
    db = client.pytest_example
    db.users.drop()
    db.posts.drop()
    return db
