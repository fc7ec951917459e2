//! Property tests (proptest) over arbitrary BSON: decoding never panics;
//! where wirelint encodes (OP_MSG with checksums, rewritten hello replies)
//! decoding gives back what went in; shapes are stable and carry no
//! values; and the proxy is byte-transparent for arbitrary message streams.

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use wirelint::analysis::{command::Command, shape};
use wirelint::wire::{op_msg, Message};

/// Keys from a small alphabet, none of them a hello topology field.
fn key() -> impl Strategy<Value = String> {
    "[a-z]{1,6}".prop_filter("not a topology field", |k| {
        !matches!(
            k.as_str(),
            "hosts" | "me" | "primary" | "tags" | "hidden" | "passive" | "msg" | "passives"
        )
    })
}

/// Arbitrary BSON values, nested, as bson-rust's own strategies build them.
fn bson_value() -> impl Strategy<Value = Bson> {
    let leaf = prop_oneof![
        any::<f64>().prop_map(Bson::Double),
        ".{0,12}".prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        Just(Bson::Null),
        any::<i32>().prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(|bytes| Bson::Binary(
            bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes
            }
        )),
        any::<i64>().prop_map(|t| Bson::DateTime(bson::DateTime::from_millis(t))),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Bson::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
        ]
    })
}

fn document() -> impl Strategy<Value = Document> {
    proptest::collection::vec((key(), bson_value()), 0..8).prop_map(|kv| kv.into_iter().collect())
}

fn bytes_of(d: &Document) -> Vec<u8> {
    bson::RawDocumentBuf::try_from(d).unwrap().into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes, and valid messages with bytes flipped or cut: no
    /// decoder or analysis step panics.
    #[test]
    fn decoding_never_panics(
        body in document(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
        noise in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut message = op_msg::encode(1, 0, 0, &bytes_of(&body), &[]);
        for (at, value) in flips {
            let i = at.index(message.len());
            message[i] = value;
        }
        let cut = cut.index(message.len() + 1);
        for (_, target) in wirelint::fuzz::TARGETS {
            target(&message);
            target(&message[..cut]);
            target(&noise);
        }
        // The document as a find's filter and as what its accepted reply
        // returns: a pair the analysis learns from, so every rule meets it
        // (the analysis target fails on a rule's panic).
        let find = op_msg::encode(2, 0, 0, &bytes_of(&doc! {"find": "c", "filter": body.clone(), "$db": "d"}), &[]);
        let reply = doc! {"cursor": {"firstBatch": [body], "id": 0_i64, "ns": "d.c"}, "ok": 1.0};
        let pair = [find, op_msg::encode(3, 2, 0, &bytes_of(&reply), &[])].concat();
        wirelint::fuzz::analysis(&pair);
    }

    /// OP_MSG as wirelint encodes it (with a checksum) decodes to the same
    /// body and sequences, and the checksum verifies.
    #[test]
    fn op_msg_encoding_round_trips(body in document(), docs in proptest::collection::vec(document(), 0..4)) {
        let body = bytes_of(&body);
        let encoded: Vec<Vec<u8>> = docs.iter().map(bytes_of).collect();
        let refs: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
        let sections: Vec<(&str, &[&[u8]])> = if docs.is_empty() { vec![] } else { vec![("documents", &refs[..])] };
        let frame = op_msg::encode(7, 3, op_msg::CHECKSUM_PRESENT, &body, &sections);
        prop_assert_eq!(wirelint::wire::frame::check(&frame).unwrap(), Some(frame.len()));
        op_msg::verify_checksum(&frame).unwrap();
        let Message::Msg(m) = Message::parse(&frame).unwrap() else { panic!("not OP_MSG") };
        prop_assert_eq!(m.body, &body[..]);
        let got: Vec<&[u8]> = m.sequences().flat_map(|s| s.documents().map(Result::unwrap).collect::<Vec<_>>()).collect();
        let want: Vec<Vec<u8>> = docs.iter().map(bytes_of).collect();
        prop_assert_eq!(got, want.iter().map(Vec::as_slice).collect::<Vec<_>>());
    }

    /// A replica-set hello reply, rewritten: a valid message whose body is
    /// the original minus the topology fields, plus msg: "isdbgrid", every
    /// other field byte for byte in order; a checksum is recomputed.
    #[test]
    fn hello_rewrite_keeps_every_other_field(extra in document(), checksum in any::<bool>()) {
        let mut hello = doc! {"isWritablePrimary": true, "maxWireVersion": 21, "setName": "rs0", "hosts": ["a:1", "b:2"], "me": "a:1"};
        for (k, v) in extra.iter() {
            if !hello.contains_key(k) {
                hello.insert(k.clone(), v.clone());
            }
        }
        let flags = if checksum { op_msg::CHECKSUM_PRESENT } else { 0 };
        let frame = op_msg::encode(0, 5, flags, &bytes_of(&hello), &[]);
        let rewritten = wirelint::proxy::topology::rewrite_hello_reply(&frame).expect("a replica-set hello");
        if checksum {
            op_msg::verify_checksum(&rewritten).unwrap();
        }
        let Message::Msg(m) = Message::parse(&rewritten).unwrap() else { panic!("not OP_MSG") };
        let got = Document::try_from(bson::RawDocument::from_bytes(m.body).unwrap()).unwrap();
        let mut want = hello.clone();
        for k in ["setName", "hosts", "me"] {
            want.remove(k);
        }
        want.insert("msg", "isdbgrid");
        prop_assert_eq!(got, want);
    }

    /// Shapes depend on keys, operators and types, never on values: two
    /// filters that differ only in their values have the same shape, and no
    /// string value appears in it.
    #[test]
    fn shapes_are_stable_and_value_free(
        fields in proptest::collection::btree_map(key(), ("[A-Z]{8,12}", any::<i32>(), any::<bool>()), 1..6),
    ) {
        let mut a = Document::new();
        let mut b = Document::new();
        for (k, (s, n, pick)) in &fields {
            if *pick {
                a.insert(k.clone(), format!("SECRET{s}"));
                b.insert(k.clone(), format!("OTHER{s}"));
            } else {
                a.insert(k.clone(), *n);
                b.insert(k.clone(), n.wrapping_add(1));
            }
        }
        let shape_of = |filter: &Document| {
            let frame = op_msg::encode(1, 0, 0, &bytes_of(&doc! {"find": "c", "filter": filter.clone(), "$db": "d"}), &[]);
            let message = Message::parse(&frame).unwrap();
            let cmd = Command::parse(&message).unwrap();
            let s = shape::of_command(&cmd);
            (s.hash, s.text)
        };
        let (id_a, text_a) = shape_of(&a);
        let (id_b, text_b) = shape_of(&b);
        prop_assert_eq!(id_a, id_b);
        prop_assert_eq!(&text_a, &text_b);
        prop_assert!(!text_a.contains("SECRET"), "{}", text_a);
        for (_, n, pick) in fields.values() {
            if !*pick && n.unsigned_abs() > 9 {
                prop_assert!(!text_a.contains(&n.to_string()), "{}", text_a);
            }
        }
    }
}

mod transparency {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// Sends `requests` through an in-process wirelint (analysis on) to a
    /// backend that records what it receives and answers with `replies`;
    /// returns (bytes the backend got, bytes the client got).
    async fn through_wirelint(requests: Vec<u8>, replies: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let backend = listener.local_addr().unwrap();
        let expected = requests.len();
        let recorder = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; expected];
            s.read_exact(&mut got).await.unwrap();
            s.write_all(&replies).await.unwrap();
            s.shutdown().await.unwrap();
            got
        });
        // directConnection: the recorder is not a server and must see only
        // the client's bytes, not wirelint's discovery hello.
        let mut settings = wirelint::ProxySettings::new(
            "127.0.0.1:0",
            &format!("mongodb://{backend}/?directConnection=true"),
        )
        .unwrap();
        settings.discover_partition_keys = false;
        let proxy = wirelint::Proxy::start(settings).await.unwrap();
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        client.write_all(&requests).await.unwrap();
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        let got = recorder.await.unwrap();
        proxy.shutdown().await;
        (got, received)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Random valid message streams arrive unchanged, both ways.
        #[test]
        fn the_proxy_is_byte_transparent(
            requests in proptest::collection::vec((document(), any::<bool>()), 1..12),
            replies in proptest::collection::vec(document(), 1..12),
        ) {
            let mut up = Vec::new();
            for (i, (d, checksum)) in requests.iter().enumerate() {
                let flags = if *checksum { op_msg::CHECKSUM_PRESENT } else { 0 };
                up.extend(op_msg::encode(i as i32 + 1, 0, flags, &bytes_of(d), &[]));
            }
            let mut down = Vec::new();
            for (i, d) in replies.iter().enumerate() {
                down.extend(op_msg::encode(1000 + i as i32, i as i32 + 1, 0, &bytes_of(d), &[]));
            }
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let (got_up, got_down) = rt.block_on(through_wirelint(up.clone(), down.clone()));
            prop_assert!(got_up == up, "requests changed on the way");
            prop_assert!(got_down == down, "replies changed on the way");
        }
    }
}
