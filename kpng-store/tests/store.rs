//! Behaviour of the writer, readers and transactions.

use std::sync::Arc;
use std::time::Duration;

use kpng_model::v1::{Node, Service};
use kpng_model::{EndpointInfo, Key, Kind, ServiceName, Value};
use kpng_store::{Error, Store, StoreConfig};

fn info(service: Service) -> kpng_model::ServiceInfo {
    kpng_model::ServiceInfo::new(service).expect("valid")
}

fn service(ns: &str, name: &str) -> Service {
    Service {
        namespace: ns.into(),
        name: name.into(),
        ..Default::default()
    }
}

#[test]
fn uncommitted_transaction_rolls_back() {
    let mut store = Store::new();
    let mut txn = store.begin();
    assert!(txn.set_service(info(service("a", "b"))));
    drop(txn);
    assert!(store.snapshot().is_empty());
    assert_eq!(store.revision(), 0);
}

#[test]
fn set_then_restore_in_one_transaction_is_no_revision() {
    let mut store = Store::new();
    let mut txn = store.begin();
    txn.set_service(info(service("a", "b")));
    txn.commit();
    let mut txn = store.begin();
    let mut changed = service("a", "b");
    changed.health_check_node_port = 30000;
    txn.set_service(info(changed));
    txn.set_service(info(service("a", "b")));
    let commit = txn.commit();
    assert_eq!(commit.revision, None);
    assert_eq!(commit.changed, 0);
    assert_eq!(store.revision(), 1);
}

#[test]
fn kind_mismatch_is_an_error() {
    let mut store = Store::new();
    let mut txn = store.begin();
    let err = txn
        .set(
            Key::Node("n1".into()),
            Value::Service(Arc::new(info(service("a", "b")))),
        )
        .expect_err("mismatch");
    assert!(matches!(err, Error::KindMismatch { .. }));
    assert_eq!(
        err.to_string(),
        "cannot store a Service value under key node/n1"
    );
}

#[test]
fn endpoints_range_over_one_service_only() {
    let mut store = Store::new();
    let mut txn = store.begin();
    for (ns, name) in [("a", "x"), ("a", "y"), ("b", "x")] {
        txn.set_service(info(service(ns, name)));
        for ip in ["10.0.0.1", "10.0.0.2"] {
            txn.set_endpoint(
                ServiceName::new(ns, name),
                EndpointInfo::new(ip.parse().expect("ip")),
            );
        }
    }
    txn.set_node(Node {
        name: "n1".into(),
        ..Default::default()
    });
    txn.commit();
    let snap = store.snapshot();
    let ids: Vec<_> = snap
        .endpoints(&ServiceName::new("a", "y"))
        .iter()
        .map(|e| e.address().to_string())
        .collect();
    assert_eq!(ids, ["10.0.0.1", "10.0.0.2"]);
    assert!(snap.endpoints(&ServiceName::new("a", "z")).is_empty());
    // Services come in the store's fixed order, each once.
    let mut names: Vec<_> = snap.services().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(names, ["a/x", "a/y", "b/x"]);
    // An endpoint may come before its Service: it is listed, the Service
    // is not.
    let mut txn = store.begin();
    let early = ServiceName::new("c", "early");
    txn.set_endpoint(
        early.clone(),
        EndpointInfo::new("10.0.0.9".parse().expect("ip")),
    );
    txn.commit();
    let snap = store.snapshot();
    assert_eq!(snap.endpoints(&early).len(), 1);
    assert!(snap.service(&early).is_none());
    assert_eq!(snap.services().count(), 3);
    assert_eq!(snap.service_names().count(), 4);
    // Deleting the last endpoint of a Service-less entry removes it.
    let mut txn = store.begin();
    txn.delete(&Key::Endpoint(early, "10.0.0.9".parse().expect("ip")));
    txn.commit();
    assert_eq!(store.snapshot().service_names().count(), 3);
    assert!(snap.node("n1").is_some());
}

#[test]
fn retain_deletes_what_a_relist_did_not_see() {
    let mut store = Store::new();
    let mut txn = store.begin();
    txn.set_service(info(service("a", "x")));
    txn.set_service(info(service("a", "y")));
    txn.commit();
    let mut txn = store.begin();
    let gone = txn.retain(Kind::Service, |k| {
        k == &Key::Service(ServiceName::new("a", "x"))
    });
    assert_eq!(gone, 1);
    assert_eq!(txn.commit().revision, Some(2));
    assert_eq!(store.snapshot().len(), 1);
}

#[test]
fn change_log_is_bounded() {
    let mut config = StoreConfig::default();
    config.log_revisions = 2;
    let mut store = Store::with_config(config);
    let first = store.snapshot();
    for i in 0..3u32 {
        let mut txn = store.begin();
        let mut s = service("a", "x");
        s.health_check_node_port = i + 1;
        txn.set_service(info(s));
        txn.commit();
    }
    let last = store.snapshot();
    assert!(
        last.changed_since(&first).is_none(),
        "revision 0 left the log"
    );
    let mut other = Store::new();
    assert!(
        last.changed_since(&other.snapshot()).is_none(),
        "another store"
    );
    let mut txn = other.begin();
    txn.set_service(info(service("a", "x")));
    txn.commit();
}

/// A transaction touching more keys than the change log keeps keeps none
/// of them: it still makes a revision only when the state changed, and
/// readers spanning it are told to walk the structures.
#[test]
fn a_transaction_larger_than_the_log_keeps_no_keys_and_still_detects_no_change() {
    let mut config = StoreConfig::default();
    config.log_keys = 4;
    let mut store = Store::with_config(config);
    let name = ServiceName::new("a", "web");
    let endpoints = |port: u16| {
        (1..=10u8)
            .map(|i| {
                let ip = std::net::IpAddr::from([10, 0, 0, i]);
                let ports =
                    kpng_model::endpoint::PortList::new([kpng_model::endpoint::PortInfo::new(
                        "http",
                        kpng_model::v1::Protocol::Tcp,
                        port,
                    )]);
                EndpointInfo::builder(ip).ports(ports).build()
            })
            .collect::<Vec<_>>()
    };
    let mut txn = store.begin();
    txn.set_service(info(service("a", "web")));
    txn.replace_endpoints(&name, &Arc::new(endpoints(80)))
        .expect("sorted");
    let commit = txn.commit();
    assert_eq!(commit.revision, Some(1));
    assert_eq!(commit.changed, 11);
    let first = store.snapshot();
    assert_eq!(first.endpoints(&name).len(), 10);

    // Ten changes and ten set back: no revision.
    let mut txn = store.begin();
    txn.replace_endpoints(&name, &Arc::new(endpoints(81)))
        .expect("sorted");
    txn.replace_endpoints(&name, &Arc::new(endpoints(80)))
        .expect("sorted");
    let commit = txn.commit();
    assert_eq!((commit.revision, commit.changed), (None, 0));

    // Ten real changes: a revision the log cannot span.
    let mut txn = store.begin();
    txn.replace_endpoints(&name, &Arc::new(endpoints(81)))
        .expect("sorted");
    assert_eq!(txn.commit().revision, Some(2));
    assert!(store.snapshot().changed_since(&first).is_none());
}

#[tokio::test]
async fn readers_wait_for_newer_revisions_and_sync() {
    let mut store = Store::new();
    let mut reader = store.reader();
    let waiter = tokio::spawn({
        let mut reader = reader.clone();
        async move { reader.newer_than(0).await.map(|s| s.revision()) }
    });
    let synced = tokio::spawn({
        let mut reader = reader.clone();
        async move {
            reader
                .listed(&[Kind::Service, Kind::Endpoint])
                .await
                .map(|s| s.revision())
        }
    });
    tokio::task::yield_now().await;
    let mut txn = store.begin();
    txn.set_service(info(service("a", "x")));
    txn.commit();
    let rev = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("joined")
        .expect("open");
    assert_eq!(rev, 1);
    store.mark_listed(Kind::Service);
    assert!(!synced.is_finished());
    store.mark_listed(Kind::Endpoint);
    let rev = tokio::time::timeout(Duration::from_secs(5), synced)
        .await
        .expect("woken")
        .expect("joined")
        .expect("open");
    assert_eq!(rev, 1, "sync flags make no revision");
    drop(store);
    assert!(matches!(reader.newer_than(1).await, Err(Error::Closed)));
}

#[test]
fn endpoint_lists_must_be_sorted_and_addresses_must_match_keys() {
    let mut store = Store::new();
    let name = ServiceName::new("a", "x");
    let at = |ip: &str| EndpointInfo::new(ip.parse().expect("ip"));
    let mut txn = store.begin();
    let unsorted = Arc::new(vec![at("10.0.0.2"), at("10.0.0.1")]);
    let err = txn
        .replace_endpoints(&name, &unsorted)
        .expect_err("unsorted");
    assert_eq!(
        err.to_string(),
        "endpoints of a/x are not sorted by address at 10.0.0.1"
    );
    let twice = Arc::new(vec![at("10.0.0.1"), at("10.0.0.1")]);
    assert!(matches!(
        txn.replace_endpoints(&name, &twice),
        Err(Error::Unsorted { .. })
    ));
    let key = Key::Endpoint(name.clone(), "10.0.0.9".parse().expect("ip"));
    let err = txn
        .set(key, Value::Endpoint(at("10.0.0.1")))
        .expect_err("mismatch");
    assert_eq!(
        err.to_string(),
        "cannot store the endpoint at 10.0.0.1 under key endpoint/a/x/10.0.0.9"
    );
    // Nothing was written.
    assert!(txn.commit().revision.is_none());

    // A list is adopted as it is: the store shares it.
    let list = Arc::new(vec![at("10.0.0.1"), at("10.0.0.2")]);
    let mut txn = store.begin();
    assert_eq!(txn.replace_endpoints(&name, &list).expect("sorted"), 2);
    txn.commit();
    assert!(std::ptr::eq(
        store.snapshot().endpoints(&name).as_ptr(),
        list.as_ptr()
    ));
    // An equal list built apart changes nothing; an empty one removes all.
    let mut txn = store.begin();
    let again = Arc::new(vec![at("10.0.0.1"), at("10.0.0.2")]);
    assert_eq!(txn.replace_endpoints(&name, &again).expect("sorted"), 0);
    assert_eq!(
        txn.replace_endpoints(&name, &Arc::default())
            .expect("empty"),
        2
    );
    txn.commit();
    assert!(store.snapshot().service_names().next().is_none());
}
