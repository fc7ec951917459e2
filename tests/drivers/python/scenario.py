"""pymongo scenarios run by tests/drivers.rs, once directly against the
backend and once through wirelint; the test compares what they print.

    python3 scenario.py crud URI DB     CRUD, cursor and aggregation results as JSON
    python3 scenario.py login URI       connectionStatus, or the login error as JSON
"""
import json
import sys

import pymongo
from pymongo.errors import OperationFailure, PyMongoError


def crud(uri, db_name):
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    coll = client[db_name].items
    coll.drop()
    out = {}
    coll.insert_many([{"_id": i, "group": i % 4, "name": f"item{i}", "tags": []} for i in range(100)])
    out["find_one"] = coll.find_one({"_id": 42})
    out["update"] = coll.update_many({"group": 1}, {"$push": {"tags": "t"}, "$inc": {"n": 1}}).modified_count
    out["replace"] = coll.replace_one({"_id": 3}, {"name": "three"}).modified_count
    out["delete"] = coll.delete_many({"group": 3}).deleted_count
    out["fam"] = coll.find_one_and_update({"_id": 1}, {"$set": {"x": 1}}, return_document=True)
    out["cursor"] = [d["_id"] for d in coll.find({}, batch_size=7).sort("_id", 1)]
    out["agg"] = list(coll.aggregate([{"$group": {"_id": "$group", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]))
    out["count"] = coll.count_documents({"group": 1})
    try:
        coll.insert_many([{"_id": 1000}, {"_id": 1000}], ordered=True)
    except PyMongoError as e:
        out["dup"] = [(w["index"], w["code"]) for w in e.details["writeErrors"]]
    out["topology"] = str(client.topology_description.topology_type_name)
    client.close()
    return out


def login(uri):
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)
    try:
        status = client.admin.command("connectionStatus")
        return {"users": status["authInfo"]["authenticatedUsers"]}
    except OperationFailure as e:
        return {"error": e.code, "message": e.details.get("errmsg"), "codeName": e.details.get("codeName")}
    finally:
        client.close()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "crud":
        result = crud(sys.argv[2], sys.argv[3])
    elif mode == "login":
        result = login(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(result, sort_keys=True, default=str))
