"""Inserts numbered documents one at a time for SECONDS through URI into
db.COLL, as an application would (retryable writes on, the driver's
defaults otherwise but a short heartbeat), and prints what happened as JSON:
the _ids the server acknowledged, and the wall-clock time of each error.
Run by tests/failover.rs across a primary stepdown.

    python3 writer.py URI DB COLL SECONDS
"""
import json
import sys
import time

import pymongo
from pymongo.errors import DuplicateKeyError, PyMongoError


def main(uri, db, coll_name, seconds):
    client = pymongo.MongoClient(
        uri, retryWrites=True, serverSelectionTimeoutMS=10000, heartbeatFrequencyMS=500
    )
    coll = client[db][coll_name]
    acked, errors, n = [], [], 0
    end = time.time() + seconds
    while time.time() < end:
        try:
            coll.insert_one({"_id": n})
            acked.append(n)
        except DuplicateKeyError:
            # Applied by an attempt whose answer was lost: stored once.
            acked.append(n)
        except PyMongoError as e:
            errors.append({"at": time.time(), "error": str(e)[:200]})
        n += 1
        time.sleep(0.01)
    client.close()
    print(json.dumps({"acked": acked, "errors": errors, "tried": n}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
