//! The backend against the kernel, in a network namespace of its own:
//! rounds applied as netlink transactions, a refused transaction that
//! leaves the kernel as it was, the full round a driver makes next (and
//! one it was told to make) replacing the tables whole, and a restart
//! that adopts the tables. Needs root, `ip` and `nft` (to read
//! the ruleset back); otherwise it prints SKIPPED and passes.

use std::process::Command;
use std::sync::Arc;

use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_model::EndpointInfo;
use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{Protocol, Service, ServicePort};
use kpng_model::view::{EndpointView, NodeView, ViewOp};
use kpng_sink::{Round, Sink};

/// A network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Option<Self> {
        let name = format!("kpng-nft-test-{}", std::process::id());
        let made = Command::new("ip").args(["netns", "add", &name]).status();
        made.is_ok_and(|s| s.success()).then_some(Self(name))
    }

    /// The ruleset of the namespace's `ip kpng` table, as `nft` lists it,
    /// without the time elements with a timeout have left (`expires 1m59s`),
    /// which runs down between two listings.
    fn table(&self) -> String {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &self.0, "nft", "list", "table", "ip", "kpng",
            ])
            .output()
            .expect("nft");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split(" expires ");
        let mut listed = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            // The time runs to the next space, comma or brace.
            let rest = part.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
            listed.push_str(rest);
        }
        listed
    }

    fn nft(&self, args: &[&str]) {
        let status = Command::new("ip")
            .args(["netns", "exec", &self.0, "nft"])
            .args(args)
            .status()
            .expect("nft");
        assert!(status.success(), "nft {args:?}");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service(name: &str, ip: &str) -> Arc<kpng_model::ServiceInfo> {
    Arc::new(
        kpng_model::ServiceInfo::new(
            Service::new("t", name)
                .with_cluster_ips([ip.parse().expect("ip")])
                .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
        )
        .expect("valid"),
    )
}

fn endpoint(ip: &str) -> EndpointView {
    let ip = ip.parse().expect("ip");
    let endpoint = EndpointInfo::builder(ip)
        .ports(PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]))
        .build();
    EndpointView::at(endpoint, ip)
        .expect("its address")
        .with_cluster(true)
}

/// Sets Service `name` at `ip` with endpoints `eps` in `view`.
fn load(view: &mut NodeView, name: &str, ip: &str, eps: &[&str]) {
    let svc = service(name, ip);
    let key = svc.service_name();
    view.apply(&ViewOp::SetService(svc)).expect("service");
    for ep in eps {
        view.apply(&ViewOp::SetEndpoint(key.clone(), endpoint(ep)))
            .expect("endpoint");
    }
}

#[test]
fn rounds_in_the_kernel_and_a_refused_one_keeps_the_old_rules() {
    let ns = match is_root().then(Netns::new).flatten() {
        Some(ns) => ns,
        None => {
            eprintln!("SKIPPED: needs root, ip and nft");
            return;
        }
    };
    let config = NftConfig::default().in_netns(&ns.0);
    let mut backend = NftBackend::new(config.clone());

    // A full round: the tables made.
    let mut view = NodeView {
        revision: 1,
        ..Default::default()
    };
    load(&mut view, "web", "10.96.0.40", &["10.244.1.5"]);
    backend.sync(&Round::full(&view)).expect("full round");
    let stats = backend.last_sync().clone();
    assert!(
        stats.replaced && !stats.adopted && stats.commands > 0,
        "{stats:?}"
    );
    assert_eq!(backend.generation(), 1);
    assert!(
        ns.table().contains("10.96.0.40 . tcp . 80"),
        "{}",
        ns.table()
    );

    // An incremental round: an endpoint more, in place.
    let before = view.clone();
    view.revision = 2;
    load(&mut view, "web", "10.96.0.40", &["10.244.1.6"]);
    backend
        .sync(&Round::between(&before, &view))
        .expect("incremental round");
    assert!(!backend.last_sync().replaced, "{:?}", backend.last_sync());
    assert_eq!(backend.last_sync().services, 1);
    assert_eq!(backend.generation(), 1);
    assert!(ns.table().contains("10.244.1.6 . 8080"), "{}", ns.table());

    // Break the kernel's copy behind the backend's back, then remove the
    // Service (which must delete that element) and add another: the
    // kernel refuses the transaction and keeps all it had.
    ns.nft(&[
        "delete",
        "element",
        "ip",
        "kpng",
        "service-keys",
        "{ 10.96.0.40 . tcp . 80 }",
    ]);
    let kept = ns.table();
    let before = view.clone();
    view.revision = 3;
    view.apply(&ViewOp::DeleteService(
        service("web", "10.96.0.40").service_name(),
    ))
    .expect("delete");
    load(&mut view, "new", "10.96.0.41", &["10.244.1.7"]);
    let err = backend
        .sync(&Round::between(&before, &view))
        .expect_err("the kernel refuses");
    assert!(err.to_string().contains("service-keys"), "{err}");
    assert_eq!(
        ns.table(),
        kept,
        "nothing of the failed transaction applied"
    );

    // The next round is full, as the driver makes it after a failure: the
    // backend replaces the tables whole and converges.
    view.revision = 4;
    load(&mut view, "new", "10.96.0.41", &["10.244.1.8"]);
    backend.sync(&Round::full(&view)).expect("replaced whole");
    let stats = backend.last_sync().clone();
    assert!(stats.replaced, "{stats:?}");
    assert_eq!(stats.services, 1, "every Service of the view rendered");
    assert_eq!(backend.generation(), 2);
    let table = ns.table();
    assert!(
        !table.contains("10.96.0.40"),
        "stale Service removed:\n{table}"
    );
    for want in [
        "10.96.0.41 . tcp . 80",
        "10.244.1.7 . 8080",
        "10.244.1.8 . 8080",
    ] {
        assert!(table.contains(want), "{want} in\n{table}");
    }

    // A full round the driver was told to make (`force_full`) replaces
    // whole too.
    view.revision = 5;
    load(&mut view, "web", "10.96.0.40", &["10.244.1.5"]);
    backend.sync(&Round::full(&view)).expect("forced full");
    assert!(backend.last_sync().replaced);
    assert_eq!(backend.last_sync().services, 2);
    assert_eq!(backend.generation(), 3);
    let empty = Round::between(&view, &view);
    backend.sync(&empty).expect("nothing to do");
    assert!(!backend.last_sync().replaced);
    assert_eq!(backend.last_sync().commands, 0);

    // A restart onto the same state adopts the tables: nothing sent.
    let table = ns.table();
    let mut second = NftBackend::new(config.clone());
    second.sync(&Round::full(&view)).expect("adopted");
    let stats = second.last_sync().clone();
    assert!(
        stats.replaced && stats.adopted && stats.commands == 0,
        "{stats:?}"
    );
    assert_eq!(ns.table(), table);
    // ... onto another state, it replaces them whole.
    let mut third = NftBackend::new(config.clone());
    view.revision = 6;
    load(&mut view, "web", "10.96.0.40", &["10.244.1.9"]);
    third.sync(&Round::full(&view)).expect("replaced");
    let stats = third.last_sync().clone();
    assert!(
        stats.replaced && !stats.adopted && stats.commands > 0,
        "{stats:?}"
    );
    assert!(ns.table().contains("10.244.1.9 . 8080"));
    // ... and onto the same state with counters switched on: the pick
    // maps are declared with them, so it replaces them too.
    let mut fourth = NftBackend::new(config.clone().counters(true));
    fourth.sync(&Round::full(&view)).expect("replaced");
    let stats = fourth.last_sync().clone();
    assert!(
        stats.replaced && !stats.adopted && stats.commands > 0,
        "{stats:?}"
    );
    assert!(ns.table().contains("counter"), "{}", ns.table());
    assert_eq!(NftBackend::cleanup(&config).expect("cleanup"), 2);
}

/// Whether the process runs as root (its effective uid, from `/proc`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().nth(1))
            == Some("0")
    })
}
