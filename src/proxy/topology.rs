//! The hello rewrite (docs/design.md, "Topology").
//!
//! A replica-set member's hello reply lists the members; a driver given only
//! the proxy's address would discover them and connect to them directly,
//! bypassing the proxy. So a reply that describes replica-set topology is
//! rewritten to describe a router (`msg: "isdbgrid"`, as mongos answers), with
//! every member-list and member-identity field removed. Everything else — wire
//! versions, size limits, `logicalSessionTimeoutMinutes`,
//! `speculativeAuthenticate`, `compression`, `topologyVersion`, cluster time —
//! is copied through byte for byte, in order. Standalone and mongos replies
//! are left untouched (the proxy stays byte-transparent where it can).
//!
//! Only replies to requests the session saw to be hellos (any spelling:
//! `hello`, `isMaster`, `ismaster`; streaming ones included) are looked at,
//! so other replies cost nothing here. Among those, a body with
//! `maxWireVersion`, an `ismaster`/`isWritablePrimary` flag and a topology
//! field is rewritten, in either envelope (OP_MSG, OP_REPLY), compressed or
//! not. Only top-level keys are read.

use crate::wire::{bson_walk, compressed, op_msg, Header, OpCode, OpCompressed, OpMsg, OpReply};

/// Fields that describe replica-set membership; none of them exists in a
/// mongos reply.
const TOPOLOGY_FIELDS: &[&[u8]] = &[
    b"hosts",
    b"passives",
    b"arbiters",
    b"setName",
    b"setVersion",
    b"primary",
    b"me",
    b"secondary",
    b"arbiterOnly",
    b"passive",
    b"hidden",
    b"tags",
    b"electionId",
    b"lastWrite",
    b"isreplicaset",
];

/// If `frame` is a hello reply describing a replica set, the rewritten
/// frame; otherwise `None` (forward the original bytes).
pub fn rewrite_hello_reply(frame: &[u8]) -> Option<Vec<u8>> {
    let opcode = Header::parse(frame)?.opcode()?;
    match opcode {
        OpCode::Msg => {
            let msg = OpMsg::parse(frame).ok()?;
            let body = rewrite_body(msg.body)?;
            Some(msg.with_body(frame, &body))
        }
        OpCode::Reply => {
            let reply = OpReply::parse(frame).ok()?;
            let mut docs = reply.documents();
            let doc = docs.next()?;
            if docs.next().is_some() {
                return None;
            }
            let body = rewrite_body(doc)?;
            Some(reply.with_documents(&[&body]))
        }
        // The compression spec says hello replies are not compressed, but
        // a backend may do it anyway: inflated, rewritten, and compressed
        // again the same way, or the member list would reach the driver.
        OpCode::Compressed => {
            let envelope = OpCompressed::parse(frame).ok()?;
            let inner = envelope.decompress().ok()?;
            if Header::parse(&inner)?.opcode() == Some(OpCode::Compressed) {
                return None;
            }
            let rewritten = rewrite_hello_reply(&inner)?;
            compressed::compress(&rewritten, envelope.compressor).ok()
        }
        _ => None,
    }
}

/// Whether a reply body is a replica-set hello reply.
pub fn is_replica_set_hello(body: &[u8]) -> bool {
    replica_set_role(body).is_some()
}

/// For a replica-set hello reply body, whether it says writable primary;
/// `None` for anything else.
fn replica_set_role(body: &[u8]) -> Option<bool> {
    let (mut wire, mut flag, mut topology) = (false, None, false);
    for element in bson_walk::elements(body) {
        let Ok(element) = element else { return None };
        match element.key {
            b"maxWireVersion" => wire = true,
            b"ismaster" | b"isWritablePrimary" => {
                flag = Some(flag.unwrap_or(false) || element.as_bool() == Some(true))
            }
            b"msg" if element.as_str() == Some("isdbgrid") => return None,
            key if TOPOLOGY_FIELDS.contains(&key) => topology = true,
            _ => {}
        }
    }
    flag.filter(|_| wire && topology)
}

/// Whether a hello reply describes a replica-set member that is not the
/// writable primary (a secondary, or a primary that stepped down): such a
/// member must never be presented as a router, and a session connected to
/// it is closed instead. Looks into OP_MSG, OP_REPLY and compressed
/// replies.
pub fn says_not_primary(frame: &[u8]) -> bool {
    let body = |body: &[u8]| replica_set_role(body) == Some(false);
    match Header::parse(frame).and_then(|h| h.opcode()) {
        Some(OpCode::Msg) => OpMsg::parse(frame).is_ok_and(|m| body(m.body)),
        Some(OpCode::Reply) => OpReply::parse(frame)
            .ok()
            .and_then(|r| r.documents().next())
            .is_some_and(body),
        Some(OpCode::Compressed) => OpCompressed::parse(frame)
            .and_then(|envelope| envelope.decompress())
            .is_ok_and(|inner| {
                Header::parse(&inner).and_then(|h| h.opcode()) != Some(OpCode::Compressed)
                    && says_not_primary(&inner)
            }),
        _ => false,
    }
}

/// The body with topology fields dropped and `msg: "isdbgrid"` appended.
fn rewrite_body(body: &[u8]) -> Option<Vec<u8>> {
    if !is_replica_set_hello(body) {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + 16);
    out.extend_from_slice(&[0; 4]);
    for element in bson_walk::elements(body).flatten() {
        if TOPOLOGY_FIELDS.contains(&element.key) || element.key == b"msg" {
            continue;
        }
        out.extend_from_slice(element.raw);
    }
    bson_walk::push_str_element(&mut out, "msg", "isdbgrid");
    out.push(0);
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    Some(out)
}

/// Server error codes the proxy answers with: (code, codeName).
pub type ErrorCode = (i32, &'static str);
/// The upstream could not be reached.
pub const HOST_UNREACHABLE: ErrorCode = (6, "HostUnreachable");
/// Authentication refused.
pub const AUTHENTICATION_FAILED: ErrorCode = (18, "AuthenticationFailed");

/// An error reply of the proxy's own to `request`, so the driver's error
/// says why (the upstream could not be reached; X.509 refused) instead of a
/// bare "connection closed". Answers OP_MSG with OP_MSG and anything else
/// with OP_REPLY.
pub fn error_reply(request: &[u8], message: &str, (code, name): ErrorCode) -> Vec<u8> {
    let header = Header::parse(request);
    let response_to = header.map(|h| h.request_id).unwrap_or(0);
    let doc = bson::rawdoc! {
        "ok": 0.0,
        "errmsg": message,
        "code": code,
        "codeName": name,
    };
    match header.and_then(|h| h.opcode()) {
        Some(OpCode::Msg) => op_msg::encode(0, response_to, 0, doc.as_bytes(), &[]),
        _ => crate::wire::op_query::encode_reply(0, response_to, 0, 0, 0, &[doc.as_bytes()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg::{verify_checksum, CHECKSUM_PRESENT};
    use crate::wire::op_query::encode_reply;
    use bson::{rawdoc, RawDocument};

    fn rs_hello() -> bson::RawDocumentBuf {
        rawdoc! {
            "topologyVersion": {"processId": bson::oid::ObjectId::new(), "counter": 6i64},
            "hosts": ["db0:27017", "db1:27017", "db2:27017"],
            "setName": "rs0", "setVersion": 1i32,
            "isWritablePrimary": true, "secondary": false,
            "primary": "db0:27017", "me": "db0:27017",
            "electionId": bson::oid::ObjectId::new(),
            "lastWrite": {"majorityWriteDate": bson::DateTime::now()},
            "maxBsonObjectSize": 16777216i32, "maxMessageSizeBytes": 48000000i32,
            "maxWriteBatchSize": 100000i32, "localTime": bson::DateTime::now(),
            "logicalSessionTimeoutMinutes": 30i32, "connectionId": 17i32,
            "minWireVersion": 0i32, "maxWireVersion": 21i32, "readOnly": false,
            "compression": ["zstd"],
            "speculativeAuthenticate": {"conversationId": 1i32, "done": false, "payload": bson::Binary{subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1,2,3]}},
            "ok": 1.0,
        }
    }

    fn keys(doc: &[u8]) -> Vec<String> {
        RawDocument::from_bytes(doc)
            .unwrap()
            .iter()
            .map(|e| e.unwrap().0.to_string())
            .collect()
    }

    #[test]
    fn op_msg_reply_becomes_a_router_and_keeps_the_rest() {
        let hello = rs_hello();
        let frame = op_msg::encode(40, 7, CHECKSUM_PRESENT, hello.as_bytes(), &[]);
        let out = rewrite_hello_reply(&frame).expect("rewritten");
        verify_checksum(&out).unwrap();
        let msg = OpMsg::parse(&out).unwrap();
        assert_eq!(msg.header.response_to, 7);
        assert_eq!(msg.header.request_id, 40);
        assert_eq!(
            keys(msg.body),
            [
                "topologyVersion",
                "isWritablePrimary",
                "maxBsonObjectSize",
                "maxMessageSizeBytes",
                "maxWriteBatchSize",
                "localTime",
                "logicalSessionTimeoutMinutes",
                "connectionId",
                "minWireVersion",
                "maxWireVersion",
                "readOnly",
                "compression",
                "speculativeAuthenticate",
                "ok",
                "msg"
            ]
        );
        let body = RawDocument::from_bytes(msg.body).unwrap();
        assert_eq!(body.get_str("msg").unwrap(), "isdbgrid");
        assert_eq!(body.get_i32("maxWireVersion").unwrap(), 21);
        // Copied values are the same bytes.
        let original = RawDocument::from_bytes(hello.as_bytes()).unwrap();
        for key in ["speculativeAuthenticate", "compression", "topologyVersion"] {
            assert_eq!(body.get(key).unwrap(), original.get(key).unwrap());
        }
        // A rewritten reply is no longer a replica-set reply: idempotent.
        assert!(rewrite_hello_reply(&out).is_none());
    }

    #[test]
    fn legacy_op_reply_is_rewritten_too() {
        let mut hello = rawdoc! {"ismaster": true, "hosts": ["a:1"], "setName": "rs0", "maxWireVersion": 17i32, "ok": 1.0};
        hello.append(bson::raw::cstr!("msg"), "something");
        let frame = encode_reply(3, 1, 8, 0, 0, &[hello.as_bytes()]);
        let out = rewrite_hello_reply(&frame).unwrap();
        let reply = OpReply::parse(&out).unwrap();
        assert_eq!(reply.response_flags, 8);
        let doc = reply.documents().next().unwrap();
        assert_eq!(keys(doc), ["ismaster", "maxWireVersion", "ok", "msg"]);
    }

    /// A backend that compresses its hello replies anyway: the reply is
    /// inflated, rewritten and compressed again with the same compressor
    /// and ids, so the member list never reaches the driver.
    #[test]
    fn compressed_replies_are_rewritten_and_compressed_again() {
        use crate::wire::compressed::{compress, Compressor};
        let plain = op_msg::encode(21, 7, 0, rs_hello().as_bytes(), &[]);
        for c in Compressor::ALL {
            let frame = compress(&plain, c).unwrap();
            let out = rewrite_hello_reply(&frame).unwrap_or_else(|| panic!("{c:?}"));
            let envelope = OpCompressed::parse(&out).unwrap();
            assert_eq!(envelope.compressor, c);
            assert_eq!(envelope.header.request_id, 21);
            assert_eq!(envelope.header.response_to, 7);
            let inner = envelope.decompress().unwrap();
            let body = OpMsg::parse(&inner).unwrap().body;
            assert!(!keys(body).iter().any(|k| k == "hosts" || k == "setName"));
            assert!(keys(body).iter().any(|k| k == "msg"));
        }
    }

    /// A member that is not (or no longer) the writable primary is told
    /// apart, in every envelope; primaries, standalones and mongos are not
    /// flagged.
    #[test]
    fn non_primary_members_are_told_apart() {
        use crate::wire::compressed::{compress, Compressor};
        let secondary = rawdoc! {"hosts": ["a:1", "b:1"], "setName": "rs0", "isWritablePrimary": false, "secondary": true, "primary": "a:1", "maxWireVersion": 21, "ok": 1.0};
        let stepped_down = rawdoc! {"hosts": ["a:1"], "setName": "rs0", "ismaster": false, "maxWireVersion": 21, "ok": 1.0};
        for doc in [&secondary, &stepped_down] {
            let frame = op_msg::encode(1, 1, 0, doc.as_bytes(), &[]);
            assert!(says_not_primary(&frame));
            assert!(says_not_primary(
                &compress(&frame, Compressor::Zlib).unwrap()
            ));
            assert!(says_not_primary(&encode_reply(
                1,
                1,
                8,
                0,
                0,
                &[doc.as_bytes()]
            )));
        }
        let standalone = rawdoc! {"isWritablePrimary": true, "maxWireVersion": 21, "ok": 1.0};
        let mongos =
            rawdoc! {"isWritablePrimary": true, "msg": "isdbgrid", "maxWireVersion": 21, "ok": 1.0};
        for doc in [rs_hello(), standalone, mongos] {
            assert!(!says_not_primary(&op_msg::encode(
                1,
                1,
                0,
                doc.as_bytes(),
                &[]
            )));
        }
    }

    #[test]
    fn standalone_mongos_and_ordinary_replies_are_untouched() {
        let standalone = rawdoc! {"isWritablePrimary": true, "maxWireVersion": 21i32, "ok": 1.0};
        let mongos = rawdoc! {"isWritablePrimary": true, "msg": "isdbgrid", "maxWireVersion": 21i32, "ok": 1.0};
        let find = rawdoc! {"cursor": {"firstBatch": [{"hosts": [], "setName": "x", "ismaster": true, "maxWireVersion": 1}], "id": 0i64, "ns": "a.b"}, "ok": 1.0};
        for doc in [standalone, mongos, find] {
            let frame = op_msg::encode(1, 1, 0, doc.as_bytes(), &[]);
            assert!(rewrite_hello_reply(&frame).is_none());
        }
    }

    #[test]
    fn error_reply_matches_the_request_envelope() {
        let req = op_msg::encode(
            77,
            0,
            0,
            rawdoc! {"hello": 1, "$db": "admin"}.as_bytes(),
            &[],
        );
        let reply = error_reply(&req, "wirelint: upstream down", HOST_UNREACHABLE);
        let msg = OpMsg::parse(&reply).unwrap();
        assert_eq!(msg.header.response_to, 77);
        let body = RawDocument::from_bytes(msg.body).unwrap();
        assert_eq!(body.get_str("errmsg").unwrap(), "wirelint: upstream down");
        let req = crate::wire::op_query::encode_query(
            78,
            "admin.$cmd",
            rawdoc! {"isMaster": 1}.as_bytes(),
        );
        let bytes = error_reply(&req, "x", HOST_UNREACHABLE);
        let reply = OpReply::parse(&bytes).unwrap();
        assert_eq!(reply.header.response_to, 78);
    }

    /// Every top-level field of `before` except the topology ones is in
    /// `after` with the same bytes, and the topology ones are gone.
    fn assert_router_rewrite(before: &[u8], after: &[u8]) {
        let before = RawDocument::from_bytes(before).unwrap();
        let after = RawDocument::from_bytes(after).unwrap();
        for field in before.iter() {
            let (key, value) = field.unwrap();
            if TOPOLOGY_FIELDS.contains(&key.as_str().as_bytes()) || key.as_str() == "msg" {
                assert!(after.get(key).unwrap().is_none(), "{key} kept");
            } else {
                assert_eq!(after.get(key).unwrap(), Some(value), "{key} changed");
            }
        }
        assert_eq!(after.get_str("msg").unwrap(), "isdbgrid");
    }

    #[test]
    fn fixture_mongodb_replica_set_primary() {
        let frame = include_bytes!("../../fixtures/wire/mongodb-rs-primary-hello.opmsg.bin");
        let out = rewrite_hello_reply(frame).expect("a replica-set reply is rewritten");
        let before = OpMsg::parse(frame).unwrap();
        let after = OpMsg::parse(&out).unwrap();
        assert_eq!(after.header.response_to, before.header.response_to);
        assert_router_rewrite(before.body, after.body);
        let body = RawDocument::from_bytes(after.body).unwrap();
        for kept in [
            "speculativeAuthenticate",
            "compression",
            "saslSupportedMechs",
            "$clusterTime",
            "logicalSessionTimeoutMinutes",
        ] {
            assert!(body.get(kept).unwrap().is_some(), "{kept} lost");
        }
    }

    #[test]
    fn fixture_mongos_and_standalone_are_left_alone() {
        for frame in [
            &include_bytes!("../../fixtures/wire/mongodb-mongos-hello.opmsg.bin")[..],
            &include_bytes!("../../fixtures/wire/mongodb-standalone-hello.opmsg.bin")[..],
        ] {
            assert!(OpMsg::parse(frame).is_ok());
            assert!(rewrite_hello_reply(frame).is_none());
        }
    }

    #[test]
    fn fixture_ferretdb_replica_set_replies_captured_live() {
        let frame = include_bytes!("../../fixtures/wire/ferretdb-rs-hello.opmsg.bin");
        let out = rewrite_hello_reply(frame).unwrap();
        assert_router_rewrite(
            OpMsg::parse(frame).unwrap().body,
            OpMsg::parse(&out).unwrap().body,
        );

        let frame = include_bytes!("../../fixtures/wire/ferretdb-rs-ismaster.opreply.bin");
        let out = rewrite_hello_reply(frame).unwrap();
        let before = OpReply::parse(frame).unwrap();
        let after = OpReply::parse(&out).unwrap();
        assert_router_rewrite(
            before.documents().next().unwrap(),
            after.documents().next().unwrap(),
        );
    }
}
