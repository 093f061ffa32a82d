//! The nft script generator, driven by arbitrary model values (names,
//! ports, addresses, policies): the script never carries user text, and
//! `nft -c` (check mode, in a network namespace of its own) accepts it.
#![no_main]
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use kpng_backend_nft::{NftBackend, NftConfig};
use kpng_model::EndpointInfo;
use kpng_model::endpoint::{PortInfo, PortList};
use kpng_model::v1::{IpSet, Protocol, Service, ServicePort};
use kpng_model::view::{EndpointView, NodeView, ViewOp};
use kpng_sink::{Round, Sink};

/// A namespace for `nft -c`, made once per fuzzing process.
fn namespace() -> &'static str {
    static NS: OnceLock<String> = OnceLock::new();
    NS.get_or_init(|| {
        let ns = format!("kpfuzz{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "add", &ns]).status();
        ns
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (head, rest) = data.split_at(16);
    let name = text(&rest[..rest.len().min(24)]);
    let port_name = text(rest.get(24..40).unwrap_or_default());
    let v6 = head[0] & 1 == 1;
    let vip = if v6 {
        format!("fd00::{:x}", u16::from_be_bytes([head[1], head[2]]))
    } else {
        format!("10.96.{}.{}", head[1], head[2])
    };
    let ep_ip = if v6 { format!("fd00:244::{:x}", head[3]) } else { format!("10.244.0.{}", head[3]) };
    let protocol = match head[4] % 3 {
        0 => Protocol::Tcp,
        1 => Protocol::Udp,
        _ => Protocol::Sctp,
    };
    let Ok(cluster_ips) = IpSet::parse_addrs("clusterIPs", [vip.as_str()]) else { return };
    let svc = Arc::new(kpng_model::ServiceInfo::new(Service {
        namespace: "ns".into(),
        name,
        r#type: i32::from(head[5] % 4),
        cluster_ips: Some(cluster_ips),
        external_traffic_policy: i32::from(head[6] % 3),
        internal_traffic_policy: i32::from(head[7] % 3),
        client_ip_affinity: (head[8] & 1 == 1).then(|| kpng_model::v1::ClientIpAffinity {
            timeout_seconds: u32::from(head[9]),
        }),
        ports: vec![ServicePort {
            name: port_name.clone(),
            protocol: protocol as i32,
            port: u32::from(u16::from_be_bytes([head[10], head[11]])),
            node_port: u32::from(u16::from_be_bytes([head[12], head[13]])),
            ..Default::default()
        }],
        ..Default::default()
    }).expect("valid"));
    let Ok(ip) = ep_ip.parse() else { return };
    let info = EndpointInfo::builder(ip)
        .ports(PortList::new([PortInfo::new(
            &port_name,
            protocol,
            u16::from_be_bytes([head[14], head[15]]),
        )]))
        .build();
    let Some(endpoint) = EndpointView::at(info, ip) else {
        return;
    };
    let endpoint = endpoint
        .with_is_local(head[0] & 2 == 2)
        .with_cluster(true)
        .with_local(head[0] & 4 == 4);
    let mut backend = NftBackend::new(NftConfig::default()).dry_run();
    let mut view = NodeView { revision: 1, ..Default::default() };
    let name = svc.service_name();
    let _ = view.apply(&ViewOp::SetService(svc.clone()));
    let _ = view.apply(&ViewOp::SetEndpoint(name, endpoint));
    if backend.sync(&Round::full(&view)).is_err() {
        return;
    }
    let script = backend.last_script();
    // A name with anything but [a-z0-9-] in it must not appear (plain short
    // words may match the script's own by chance).
    let odd = svc.name.chars().any(|c| !c.is_ascii_alphanumeric() && c != '-');
    if odd && svc.name.len() >= 4 {
        assert!(!script.contains(svc.name.as_str()), "user text in the script");
    }
    let mut check = Command::new("ip")
        .args(["netns", "exec", namespace(), "nft", "-c", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft");
    check.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write");
    let out = check.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft -c refused:\n{}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
});
