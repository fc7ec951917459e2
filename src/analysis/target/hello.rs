//! Which platform answered a hello.
//!
//! The body of a reply to `hello` / `isMaster` / `ismaster` names its
//! platform in one of these ways, checked in this order:
//!
//! 1. An `internal` document, which only the DocumentDB gateway (the one
//!    in front of Azure's vCore clusters and of the open-source DocumentDB)
//!    sends. Its `kind` is `azuredocumentdb` on Azure and empty in the
//!    open-source build; without a `kind`, a `cosmos_versions` or
//!    `documentdb_versions` list is Azure's; an `internal` with none of
//!    these, beside `msg: "isdbgrid"`, is the open-source gateway's.
//! 2. `_t: "IsMasterResponse"`, a field of Azure Cosmos DB for MongoDB
//!    (RU) replies.
//! 3. A host name in `me`, `primary` or `hosts` under a platform's
//!    domain: [`HOST_SUFFIXES`].
//! 4. FerretDB's fixed answer: `connectionId` 42 on every connection and
//!    no `topologyVersion`, which MongoDB sends from 4.4 (wire version 9)
//!    on. FerretDB 2.x (on DocumentDB) also always offers exactly
//!    `saslSupportedMechs: ["SCRAM-SHA-256"]`; FerretDB 1.x offers
//!    mechanisms only when asked, and then `PLAIN` or the user's own.
//!
//! Anything else is `None`; a self-hosted MongoDB's reply is among them,
//! as nothing in it names MongoDB.
//!
//! Only top-level fields are read (at most [`MAX_FIELDS`]), `internal`'s
//! own top-level fields and the first [`MAX_HOSTS`] entries of `hosts`; a
//! malformed element ends the walk, and what was read before it counts.

use crate::wire::bson_walk;
use bson::RawDocument;

use super::Target;

/// The most top-level fields read, in the reply or in `internal`.
const MAX_FIELDS: usize = 128;
/// The most `hosts` entries read.
const MAX_HOSTS: usize = 32;

/// Host-name endings (compared without the port, ignoring ASCII case) and
/// the platform whose domain they are: Azure Cosmos DB for MongoDB vCore
/// (`mongocluster.cosmos.azure.com`), RU (`mongo.cosmos.azure.com`;
/// accounts of server version 3.2 `documents.azure.com`, and
/// `documents.azure.cn` in Azure China), Amazon DocumentDB instance-based and elastic clusters, and
/// MongoDB Atlas (`mongodb.net`).
const HOST_SUFFIXES: &[(&str, Target)] = &[
    (".mongocluster.cosmos.azure.com", Target::CosmosVcore),
    (".mongo.cosmos.azure.com", Target::CosmosRu),
    (".documents.azure.com", Target::CosmosRu),
    (".documents.azure.cn", Target::CosmosRu),
    (".docdb.amazonaws.com", Target::DocumentDb),
    (".docdb-elastic.amazonaws.com", Target::DocumentDb),
    (".mongodb.net", Target::MongoDb),
];

/// The platform a reply to `hello` (or `isMaster`) comes from, when it
/// says; `None` when nothing in it names one.
pub fn detect(reply: &RawDocument) -> Option<Target> {
    let seen = Seen::read(reply);
    seen.internal
        .and_then(|internal| gateway(internal, seen.isdbgrid))
        .or(seen.cosmos_type_tag.then_some(Target::CosmosRu))
        .or(seen.host)
        .or_else(|| seen.ferretdb())
}

/// What the rules need from a reply's top-level fields.
#[derive(Default)]
struct Seen<'a> {
    internal: Option<&'a RawDocument>,
    cosmos_type_tag: bool,
    isdbgrid: bool,
    /// The platform of the first host name under a known domain.
    host: Option<Target>,
    connection_id: Option<i64>,
    topology_version: bool,
    max_wire_version: Option<i64>,
    only_scram_sha_256: bool,
}

impl<'a> Seen<'a> {
    fn read(reply: &'a RawDocument) -> Seen<'a> {
        // On the raw elements (no key decoded or checked but the ones
        // compared): the walk every run makes once.
        let mut seen = Seen::default();
        let elements = bson_walk::elements(reply.as_bytes()).take(MAX_FIELDS);
        for e in elements.map_while(Result::ok) {
            match e.key {
                b"internal" => {
                    seen.internal = (e.element_type == 0x03)
                        .then(|| RawDocument::from_bytes(e.value).ok())
                        .flatten()
                }
                b"_t" => seen.cosmos_type_tag = e.as_str() == Some("IsMasterResponse"),
                b"msg" => seen.isdbgrid = e.as_str() == Some("isdbgrid"),
                b"me" | b"primary" => seen.note_host(e.as_str()),
                b"hosts" if e.element_type == 0x04 => {
                    let hosts = bson_walk::elements(e.value).take(MAX_HOSTS);
                    for host in hosts.map_while(Result::ok) {
                        seen.note_host(host.as_str());
                    }
                }
                b"connectionId" => {
                    seen.connection_id = e.read().number().filter(|_| e.element_type != 0x01)
                }
                b"topologyVersion" => seen.topology_version = true,
                b"maxWireVersion" => {
                    seen.max_wire_version = e.read().number().filter(|_| e.element_type != 0x01)
                }
                b"saslSupportedMechs" => {
                    seen.only_scram_sha_256 = e.element_type == 0x04 && only_scram_sha_256(e.value)
                }
                _ => {}
            }
        }
        seen
    }

    fn note_host(&mut self, host: Option<&str>) {
        if self.host.is_none() {
            self.host = host.and_then(host_platform);
        }
    }

    fn ferretdb(&self) -> Option<Target> {
        let ferretdb = self.connection_id == Some(42)
            && !self.topology_version
            && self.max_wire_version.is_some_and(|v| v >= 9);
        ferretdb.then_some(if self.only_scram_sha_256 {
            Target::DocumentDb
        } else {
            Target::MongoDb
        })
    }
}

/// The platform behind a DocumentDB gateway's `internal` document.
fn gateway(internal: &RawDocument, isdbgrid: bool) -> Option<Target> {
    let (mut kind, mut versions) = (None, false);
    for (key, value) in internal.iter().take(MAX_FIELDS).map_while(Result::ok) {
        match key.as_str() {
            "kind" => kind = value.as_str(),
            "cosmos_versions" | "documentdb_versions" => versions = true,
            _ => {}
        }
    }
    match kind {
        Some(kind) if kind.eq_ignore_ascii_case("azuredocumentdb") => Some(Target::CosmosVcore),
        Some(_) => Some(Target::DocumentDb),
        None if versions => Some(Target::CosmosVcore),
        None => isdbgrid.then_some(Target::DocumentDb),
    }
}

/// The platform whose domain `host` (`name` or `name:port`) is under.
fn host_platform(host: &str) -> Option<Target> {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    HOST_SUFFIXES
        .iter()
        .find(|(suffix, _)| {
            name.len() > suffix.len()
                && name.as_bytes()[name.len() - suffix.len()..]
                    .eq_ignore_ascii_case(suffix.as_bytes())
        })
        .map(|&(_, target)| target)
}

/// Whether the mechanisms offered are exactly `["SCRAM-SHA-256"]`.
fn only_scram_sha_256(mechanisms: &[u8]) -> bool {
    let mut mechanisms = bson_walk::elements(mechanisms);
    mechanisms
        .next()
        .is_some_and(|m| m.is_ok_and(|m| m.as_str() == Some("SCRAM-SHA-256")))
        && mechanisms.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{OpMsg, OpReply};
    use bson::{rawdoc, DateTime, RawArrayBuf, RawDocumentBuf, Timestamp};

    // Follows the `db.isMaster()` sample in Microsoft's "Set up global
    // distribution using Azure Cosmos DB for MongoDB" (MicrosoftDocs/
    // azure-databases-docs, articles/cosmos-db/mongodb/
    // tutorial-global-distribution.md): `_t`, `tags.region`, hosts on
    // `documents.azure.com:10255`, `setName: "globaldb"`.
    #[test]
    fn cosmos_ru_documented_ismaster() {
        let mut reply = rawdoc! {
            "_t": "IsMasterResponse",
            "ok": 1,
            "ismaster": true,
            "maxMessageSizeBytes": 4194304,
            "maxWriteBatchSize": 1000,
            "minWireVersion": 0,
            "maxWireVersion": 2,
            "tags": { "region": "West Europe" },
            "hosts": [
                "contoso-westus.documents.azure.com:10255",
                "contoso-westeurope.documents.azure.com:10255",
            ],
            "setName": "globaldb",
            "setVersion": 1,
            "primary": "contoso-westeurope.documents.azure.com:10255",
            "me": "contoso-westeurope.documents.azure.com:10255",
        };
        assert_eq!(detect(&reply), Some(Target::CosmosRu));
        // Either signal alone is enough.
        let tag_only = rawdoc! { "_t": "IsMasterResponse", "ismaster": true, "ok": 1 };
        assert_eq!(detect(&tag_only), Some(Target::CosmosRu));
        reply = rawdoc! { "hosts": ["contoso-chinaeast2.documents.azure.cn:10255"], "ok": 1 };
        assert_eq!(detect(&reply), Some(Target::CosmosRu));
    }

    // Follows the Cosmos DB (RU) handshake reply recorded in
    // xp-forge/mongodb, src/test/php/com/mongodb/unittest/
    // MongoConnectionTest.class.php (`connect_to_azure_cosmos_db`): no
    // `_t`, no `topologyVersion`, hosts on `mongo.cosmos.azure.com:10255`.
    #[test]
    fn cosmos_ru_recorded_reply() {
        let host = "example-germanywestcentral.mongo.cosmos.azure.com:10255";
        let reply = rawdoc! {
            "ismaster": true,
            "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 1000,
            "localTime": 1738183466672_i64,
            "logicalSessionTimeoutMinutes": 30,
            "minWireVersion": 0,
            "maxWireVersion": 18,
            "readOnly": false,
            "tags": { "region": "Germany West Central" },
            "hosts": [host],
            "setName": "globaldb",
            "setVersion": 1,
            "primary": host,
            "me": host,
            "connectionId": 382867193,
            "ok": 1.0,
        };
        assert_eq!(detect(&reply), Some(Target::CosmosRu));
    }

    // Follows the Azure DocumentDB (vCore) hello in microsoft/
    // vscode-documentdb, src/documentdb/utils/getClusterMetadata.test.ts:
    // `msg: "isdbgrid"`, `internal: { documentdb_versions, kind:
    // "azuredocumentdb" }`. The older `internal.cosmos_versions` follows
    // powersync-ja/powersync-service, modules/module-mongodb/src/
    // replication/replication-utils.ts (revision 67264184d).
    #[test]
    fn cosmos_vcore_internal_section() {
        let reply = rawdoc! {
            "isWritablePrimary": true,
            "msg": "isdbgrid",
            "hosts": ["host-a", "host-b"],
            "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 25000,
            "maxWireVersion": 25,
            "minWireVersion": 0,
            "connectionId": 1339367315,
            "localTime": 1782455165668_i64,
            "logicalSessionTimeoutMinutes": 30,
            "operationTime": Timestamp { time: 1782455165, increment: 668 },
            "internal": {
                "documentdb_versions": ["1.112-0", "1.113.0", "12.1-1"],
                "kind": "azuredocumentdb",
            },
            "saslSupportedMechs": ["SCRAM-SHA-256", "MONGODB-OIDC"],
            "readOnly": false,
            "ok": 1,
        };
        assert_eq!(detect(&reply), Some(Target::CosmosVcore));

        let older = rawdoc! {
            "isWritablePrimary": true,
            "msg": "isdbgrid",
            "internal": { "cosmos_versions": ["1.104-1", "1.105.0", "12.1-1"] },
            "ok": 1,
        };
        assert_eq!(detect(&older), Some(Target::CosmosVcore));

        // A vCore host name, as its connection strings give it.
        let by_host = rawdoc! {
            "msg": "isdbgrid",
            "hosts": ["c-contoso.0123abcd.mongocluster.cosmos.azure.com:10260"],
            "ok": 1,
        };
        assert_eq!(detect(&by_host), Some(Target::CosmosVcore));
    }

    // Follows the open-source DocumentDB gateway's hello, documentdb/
    // documentdb, pg_documentdb_gw/src/processor/ismaster.rs: `msg:
    // "isdbgrid"`, `saslSupportedMechs: ["SCRAM-SHA-256"]` and an
    // `internal` that is empty, or (later builds, pg_configuration.rs)
    // `{ documentdb_versions, kind }` with the setup's `instance_kind`,
    // empty unless set.
    #[test]
    fn open_source_documentdb_gateway() {
        let reply = rawdoc! {
            "isWritablePrimary": true,
            "msg": "isdbgrid",
            "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 100000,
            "localTime": 1756100000000_i64,
            "logicalSessionTimeoutMinutes": 30,
            "minWireVersion": 0,
            "maxWireVersion": 21,
            "readOnly": false,
            "connectionId": 7,
            "saslSupportedMechs": ["SCRAM-SHA-256"],
            "internal": {},
            "ok": 1.0,
        };
        assert_eq!(detect(&reply), Some(Target::DocumentDb));

        let later = rawdoc! {
            "isWritablePrimary": true,
            "msg": "isdbgrid",
            "connectionId": 42,
            "saslSupportedMechs": ["SCRAM-SHA-256"],
            "internal": { "documentdb_versions": ["0.107-0"], "kind": "" },
            "ok": 1.0,
        };
        assert_eq!(detect(&later), Some(Target::DocumentDb));

        // An empty `internal` names nothing without the gateway's `msg`.
        let bare = rawdoc! { "ismaster": true, "internal": {}, "ok": 1 };
        assert_eq!(detect(&bare), None);
    }

    // Modelled (no captured reply found) on Amazon DocumentDB's
    // "Connecting to Amazon DocumentDB as a replica set" (replica set
    // `rs0` whose members are the instance endpoints, `*.docdb.amazonaws.com`)
    // and on the host endings MongoDB's drivers report as DocumentDB
    // (mongodb/mongo-rust-driver, src/client/options/mod.rs).
    #[test]
    fn amazon_documentdb_hosts() {
        let reply = rawdoc! {
            "setName": "rs0",
            "hosts": [
                "sample-instance-1.abcdefghijkl.us-east-1.docdb.amazonaws.com:27017",
                "sample-instance-2.abcdefghijkl.us-east-1.docdb.amazonaws.com:27017",
            ],
            "setVersion": 1,
            "ismaster": true,
            "secondary": false,
            "primary": "sample-instance-1.abcdefghijkl.us-east-1.docdb.amazonaws.com:27017",
            "me": "sample-instance-1.abcdefghijkl.us-east-1.docdb.amazonaws.com:27017",
            "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 100000,
            "localTime": DateTime::from_millis(1_700_000_000_000),
            "minWireVersion": 0,
            "maxWireVersion": 13,
            "ok": 1.0,
        };
        assert_eq!(detect(&reply), Some(Target::DocumentDb));
        let elastic = rawdoc! {
            "ismaster": true,
            "msg": "isdbgrid",
            "me": "Sample-Cluster-123456789012.US-East-1.DocDB-Elastic.AmazonAWS.com:27017",
            "ok": 1.0,
        };
        assert_eq!(detect(&elastic), Some(Target::DocumentDb));
    }

    fn fixture_bodies() -> [RawDocumentBuf; 2] {
        let msg = include_bytes!("../../../fixtures/wire/ferretdb-rs-hello.opmsg.bin");
        let reply = include_bytes!("../../../fixtures/wire/ferretdb-rs-ismaster.opreply.bin");
        let reply = OpReply::parse(reply).unwrap();
        [
            RawDocument::from_bytes(OpMsg::parse(msg).unwrap().body).unwrap(),
            RawDocument::from_bytes(reply.documents().next().unwrap()).unwrap(),
        ]
        .map(|doc| doc.to_owned())
    }

    // The replies captured from FerretDB v1.24.2 (fixtures/wire, see
    // make_hello_fixtures.py): `connectionId: 42`, no `topologyVersion`,
    // no `saslSupportedMechs` (none was asked for).
    #[test]
    fn ferretdb_v1_captured_replies() {
        for body in fixture_bodies() {
            assert_eq!(body.get_i32("connectionId").unwrap(), 42);
            assert_eq!(detect(&body), Some(Target::MongoDb));
        }
    }

    // Follows FerretDB 2.x's hello, FerretDB/FerretDB internal/handler/
    // msg_hello.go (v2.0.0 on): the 1.x fields plus `saslSupportedMechs:
    // ["SCRAM-SHA-256"]` in every reply.
    #[test]
    fn ferretdb_v2_from_source() {
        let reply = rawdoc! {
            "isWritablePrimary": true,
            "maxBsonObjectSize": 16777216,
            "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 100000,
            "localTime": DateTime::from_millis(1_760_000_000_000),
            "logicalSessionTimeoutMinutes": 30,
            "connectionId": 42,
            "minWireVersion": 0,
            "maxWireVersion": 21,
            "readOnly": false,
            "saslSupportedMechs": ["SCRAM-SHA-256"],
            "ok": 1.0,
        };
        assert_eq!(detect(&reply), Some(Target::DocumentDb));
        // FerretDB 1.x asked for a user's mechanisms answers with them.
        let mut v1 = fixture_bodies()[0].clone();
        let mut mechs = RawArrayBuf::new();
        mechs.push("PLAIN");
        v1.append(bson::cstr!("saslSupportedMechs"), mechs);
        assert_eq!(detect(&v1), Some(Target::MongoDb));
    }

    // Follows an Atlas replica-set member's hello (hosts under
    // `mongodb.net`, the domain of Atlas connection strings in MongoDB's
    // "Connection Strings" manual page; `tags` with provider and node type).
    #[test]
    fn atlas_hosts_are_mongodb() {
        let host = "ac-abc1234-shard-00-01.xyz9876.mongodb.net:27017";
        let reply = rawdoc! {
            "topologyVersion": { "processId": bson::oid::ObjectId::new(), "counter": 6_i64 },
            "hosts": [host],
            "setName": "atlas-abc123-shard-0",
            "setVersion": 9,
            "isWritablePrimary": true,
            "secondary": false,
            "primary": host,
            "tags": { "provider": "AWS", "region": "EU_CENTRAL_1", "nodeType": "ELECTABLE" },
            "me": host,
            "maxWireVersion": 21,
            "connectionId": 42,
            "ok": 1.0,
        };
        assert_eq!(detect(&reply), Some(Target::MongoDb));
    }

    // The MongoDB 7.0 replies modelled in fixtures/wire (replica-set
    // primary, mongos, standalone) and a bare standalone name nothing.
    #[test]
    fn plain_mongodb_replies_are_unknown() {
        for frame in [
            &include_bytes!("../../../fixtures/wire/mongodb-rs-primary-hello.opmsg.bin")[..],
            &include_bytes!("../../../fixtures/wire/mongodb-mongos-hello.opmsg.bin")[..],
            &include_bytes!("../../../fixtures/wire/mongodb-standalone-hello.opmsg.bin")[..],
        ] {
            let body = RawDocument::from_bytes(OpMsg::parse(frame).unwrap().body).unwrap();
            assert_eq!(detect(body), None);
        }
        let standalone = rawdoc! {
            "isWritablePrimary": true,
            "maxBsonObjectSize": 16777216,
            "maxWireVersion": 8,
            "minWireVersion": 0,
            "connectionId": 42,
            "ok": 1.0,
        };
        assert_eq!(detect(&standalone), None);
        let replica_set = rawdoc! {
            "topologyVersion": { "processId": bson::oid::ObjectId::new(), "counter": 1_i64 },
            "hosts": ["db0.example.net:27017", "localhost:27017", "10.0.0.5"],
            "setName": "globaldb",
            "isWritablePrimary": true,
            "primary": "db0.example.net:27017",
            "me": "db0.example.net:27017",
            "connectionId": 42,
            "maxWireVersion": 21,
            "ok": 1.0,
        };
        assert_eq!(detect(&replica_set), None);
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let wrong_types = rawdoc! {
            "internal": "azuredocumentdb",
            "_t": 1,
            "msg": ["isdbgrid"],
            "me": 5,
            "primary": { "host": "x.mongo.cosmos.azure.com" },
            "hosts": "x.docdb.amazonaws.com:27017",
            "connectionId": "42",
            "maxWireVersion": 21.0,
            "saslSupportedMechs": "SCRAM-SHA-256",
        };
        assert_eq!(detect(&wrong_types), None);
        assert_eq!(detect(&rawdoc! {}), None);

        let odd_internal = rawdoc! {
            "msg": "isdbgrid",
            "internal": { "kind": 3, "nested": { "kind": "azuredocumentdb" } },
        };
        assert_eq!(detect(&odd_internal), Some(Target::DocumentDb));

        // Only the first entries of a huge `hosts` are read.
        let mut hosts = RawArrayBuf::new();
        for i in 0..100_000 {
            hosts.push(format!("node{i}.example.net:27017"));
        }
        hosts.push("late.mongo.cosmos.azure.com:10255");
        let huge = rawdoc! { "hosts": hosts };
        assert_eq!(detect(&huge), None);

        let mut mixed = RawArrayBuf::new();
        mixed.push(1);
        mixed.push(rawdoc! { "h": "a" });
        mixed.push(":");
        mixed.push("");
        mixed.push("mongo.cosmos.azure.com:10255");
        mixed.push("X.MONGO.COSMOS.AZURE.COM:");
        let doc = rawdoc! { "hosts": mixed };
        assert_eq!(detect(&doc), Some(Target::CosmosRu));

        // A string whose declared length runs past the document: the walk
        // stops there, keeping what came before.
        let mut bytes = rawdoc! { "_t": "IsMasterResponse" }.into_bytes();
        bytes.pop();
        bytes.extend_from_slice(b"\x02k\x00\xff\x00\x00\x00x\x00\x00");
        let len = bytes.len() as i32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        let doc = RawDocument::from_bytes(&bytes).unwrap();
        assert!(doc.iter().any(|field| field.is_err()));
        assert_eq!(detect(doc), Some(Target::CosmosRu));
    }
}
