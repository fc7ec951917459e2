import os

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
    # A database per pytest-xdist worker, so that `pytest -n 2` works too
    # (wirelint reads `pytest_example_gw0`, `_gw1` as one database).
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    db = client["pytest_example_" + worker if worker else "pytest_example"]
    db.users.drop()
    db.posts.drop()
    return db
