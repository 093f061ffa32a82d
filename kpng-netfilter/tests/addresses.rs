//! Following interface addresses over rtnetlink, in network namespaces
//! these tests create (as root; skipped otherwise): addresses added and
//! removed on a veth and on loopback are reported, and listed.

use std::fs::File;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kpng_netfilter::addresses::{AddressChange, AddressEvents, interface_addresses};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A network namespace of this test, deleted on drop (also on failure).
struct Netns {
    name: String,
}

impl Netns {
    /// `None` (the test is skipped) when not root.
    fn new() -> Option<Self> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: network namespaces need root");
            return None;
        }
        let name = format!(
            "kpngaddr-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let status = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("ip runs");
        assert!(status.success(), "ip netns add {name}");
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        Some(ns)
    }

    /// `ip -n NAME args…`.
    fn ip(&self, args: &[&str]) {
        let status = Command::new("ip")
            .args(["-n", &self.name])
            .args(args)
            .status()
            .expect("ip runs");
        assert!(status.success(), "ip -n {} {args:?}", self.name);
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Waits (5 s at most) until `events` reports `wanted`.
async fn reported(events: &mut AddressEvents, wanted: AddressChange) {
    let wait = async {
        while let Some(changes) = events.changed().await {
            if changes.contains(&wanted) {
                return;
            }
        }
        panic!("the connection ended before {wanted:?}");
    };
    tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .unwrap_or_else(|_| panic!("{wanted:?} not reported within 5 s"));
}

#[tokio::test]
async fn addresses_added_and_removed_in_a_namespace_are_reported_and_listed() {
    let Some(ns) = Netns::new() else { return };
    ns.ip(&[
        "link", "add", "kpng0", "type", "veth", "peer", "name", "kpng1",
    ]);
    ns.ip(&["link", "set", "kpng0", "up"]);
    let mut events = AddressEvents::open(Some(&ns.path())).expect("opens in the namespace");

    let v4: IpAddr = "10.26.0.1".parse().expect("address");
    let v6: IpAddr = "fd00:26::1".parse().expect("address");
    let before = events.addresses().await.expect("lists");
    assert!(
        before.contains(&"127.0.0.1".parse().expect("address")),
        "{before:?}"
    );
    assert!(!before.contains(&v4) && !before.contains(&v6), "{before:?}");

    ns.ip(&["addr", "add", "10.26.0.1/24", "dev", "kpng0"]);
    reported(&mut events, AddressChange::Added(v4)).await;
    ns.ip(&["addr", "add", "fd00:26::1/128", "dev", "lo"]);
    reported(&mut events, AddressChange::Added(v6)).await;
    let now = events.addresses().await.expect("lists");
    assert!(now.contains(&v4) && now.contains(&v6), "{now:?}");

    // The same addresses without a runtime, from a thread in the namespace.
    let file = File::open(ns.path()).expect("namespace file");
    let listed = std::thread::spawn(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        interface_addresses()
    })
    .join()
    .expect("thread");
    assert!(listed.contains(&v4) && listed.contains(&v6), "{listed:?}");

    ns.ip(&["addr", "del", "10.26.0.1/24", "dev", "kpng0"]);
    reported(&mut events, AddressChange::Removed(v4)).await;
    let after = events.addresses().await.expect("lists");
    assert!(!after.contains(&v4) && after.contains(&v6), "{after:?}");
}

#[test]
fn opening_outside_a_runtime_is_an_error() {
    let error = AddressEvents::open(None).expect_err("no runtime");
    assert!(error.to_string().contains("rtnetlink"), "{error}");
}
