//! `mongodb+srv://` upstreams, resolved against a real DNS server on
//! loopback (hickory-server, authoritative for `wirelint.test.`, started by
//! the test): the SRV record's target and port, the target's address, the
//! TXT record's options; looked up again periodically; and a record naming
//! a host outside the domain refused.

mod common;

use common::Backend;
use hickory_server::authority::{Catalog, ZoneType};
use hickory_server::proto::rr::rdata::{A, SOA, SRV, TXT};
use hickory_server::proto::rr::{Name, RData, Record};
use hickory_server::store::in_memory::InMemoryAuthority;
use mongodb::bson::{doc, Document};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

fn name(s: &str) -> Name {
    Name::from_str(s).unwrap()
}

/// An authoritative DNS server for `wirelint.test.` on 127.0.0.1 (UDP and
/// TCP), its zone open to changes.
async fn dns_server() -> (SocketAddr, Arc<InMemoryAuthority>) {
    let origin = name("wirelint.test.");
    let mut zone = InMemoryAuthority::empty(origin.clone(), ZoneType::Primary, false);
    zone.upsert_mut(
        Record::from_rdata(
            origin.clone(),
            60,
            RData::SOA(SOA::new(
                name("ns.wirelint.test."),
                name("admin.wirelint.test."),
                1,
                60,
                60,
                60,
                1,
            )),
        ),
        0,
    );
    zone.upsert_mut(
        Record::from_rdata(
            name("db0.wirelint.test."),
            1,
            RData::A(A::new(127, 0, 0, 1)),
        ),
        0,
    );
    let zone = Arc::new(zone);
    let mut catalog = Catalog::new();
    catalog.upsert(origin.into(), vec![zone.clone()]);
    let mut server = hickory_server::ServerFuture::new(catalog);
    // UDP and TCP on one port: the UDP port is picked by the kernel, and
    // the same TCP port may be taken by another process; pick again then.
    let (udp, tcp) = loop {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        match tokio::net::TcpListener::bind(udp.local_addr().unwrap()).await {
            Ok(tcp) => break (udp, tcp),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => panic!("binding the DNS server's TCP port: {e}"),
        }
    };
    let addr = udp.local_addr().unwrap();
    server.register_socket(udp);
    server.register_listener(tcp, Duration::from_secs(5));
    tokio::spawn(async move {
        let _ = server.block_until_done().await;
    });
    (addr, zone)
}

async fn set_srv(zone: &InMemoryAuthority, serial: u32, target: &str, port: u16) {
    zone.upsert(
        Record::from_rdata(
            name("_mongodb._tcp.cluster.wirelint.test."),
            1,
            RData::SRV(SRV::new(0, 0, port, name(target))),
        ),
        serial,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn srv_upstreams_are_resolved_and_looked_up_again() {
    let backend = Backend::shared();
    let (dns, zone) = dns_server().await;
    set_srv(&zone, 1, "db0.wirelint.test.", backend.port).await;
    zone.upsert(
        Record::from_rdata(
            name("cluster.wirelint.test."),
            1,
            RData::TXT(TXT::new(vec!["authSource=admin".into()])),
        ),
        1,
    )
    .await;

    let mut settings = common::settings("mongodb+srv://cluster.wirelint.test/?tls=false");
    settings.forward.srv.dns_servers = vec![dns];
    settings.forward.srv.rescan = Duration::from_millis(500);
    settings.forward.primary_check = Duration::from_millis(250);
    let proxy = common::proxy_with(settings).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client.database("srv").collection::<Document>("c");
    coll.insert_one(doc! {"via": "srv"}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {"via": "srv"}).await.unwrap(), 1);
    let first = format!("db0.wirelint.test:{}", backend.port);
    assert!(!common::log_lines_with(&["seed list resolved", &first]).is_empty());

    // The record changes: the new list is picked up by the periodic lookup.
    set_srv(&zone, 2, "db0.wirelint.test.", backend.port + 1).await;
    let second = format!("db0.wirelint.test:{}", backend.port + 1);
    assert!(
        common::eventually(Duration::from_secs(5), || !common::log_lines_with(&[
            "seed list resolved",
            &second
        ])
        .is_empty())
        .await,
        "the SRV record was not looked up again"
    );
    proxy.shutdown().await;

    // A record naming a host outside the URI host's domain is refused, and
    // the client is told why.
    let (dns, zone) = dns_server().await;
    set_srv(&zone, 1, "evil.example.org.", backend.port).await;
    let mut settings = common::settings("mongodb+srv://cluster.wirelint.test/?tls=false");
    settings.forward.srv.dns_servers = vec![dns];
    let proxy = common::proxy_with(settings).await;
    let err = common::ping(&proxy.connection_string(), Duration::from_secs(3))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("outside the domain of cluster.wirelint.test"),
        "{err}"
    );
    proxy.shutdown().await;
}
