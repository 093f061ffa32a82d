//! The store and the diff, driven by arbitrary writes: replaying diff(A, B)
//! on a copy of A gives B, for every pair of revisions, and diff(A, A) is
//! empty.
#![no_main]
use libfuzzer_sys::fuzz_target;

use kpng_model::EndpointInfo;
use kpng_model::v1::Service;
use kpng_model::{Key, ServiceName, Value};
use kpng_store::Store;

fuzz_target!(|data: &[u8]| {
    let mut store = Store::new();
    let mut snapshots = vec![store.snapshot()];
    for txn_bytes in data.chunks(8).take(64) {
        let mut txn = store.begin();
        for pair in txn_bytes.chunks(2) {
            let (op, arg) = (pair[0], pair.get(1).copied().unwrap_or(0));
            let name = ServiceName::new("ns", format!("s{}", arg % 4));
            let ip = std::net::IpAddr::from([10, 0, 0, arg % 5]);
            match op % 5 {
                0 => {
                    txn.set_service(Service {
                        namespace: "ns".into(),
                        name: format!("s{}", arg % 4),
                        health_check_node_port: u32::from(arg >> 4),
                        ..Default::default()
                    });
                }
                1 => {
                    let node = format!("n{}", arg >> 5);
                    let ready = arg & 1 == 1;
                    let endpoint = EndpointInfo::builder(ip)
                        .conditions(ready, true, false)
                        .node(&node, "")
                        .build();
                    txn.set_endpoint(name, endpoint);
                }
                2 => {
                    txn.delete(&Key::Endpoint(name, ip));
                }
                3 => {
                    txn.delete(&Key::Service(name));
                }
                _ => {
                    let _ = txn.set(
                        Key::Node(format!("n{}", arg % 3).into()),
                        Value::Node(std::sync::Arc::new(kpng_model::v1::Node {
                            name: format!("n{}", arg % 3),
                            zone: format!("z{}", arg >> 6),
                            ..Default::default()
                        })),
                    );
                }
            }
        }
        if txn.commit().revision.is_some() {
            snapshots.push(store.snapshot());
        }
    }
    for a in &snapshots {
        assert!(a.diff(a).is_empty());
        for b in &snapshots {
            let ops = a.diff(b);
            let mut replica = Store::new();
            let mut txn = replica.begin();
            for (k, v) in a.iter() {
                let _ = txn.set(k, v);
            }
            txn.apply(&ops).expect("ops apply");
            txn.commit();
            let got: Vec<_> = replica.snapshot().iter().collect();
            let want: Vec<_> = b.iter().collect();
            assert_eq!(got, want, "diff(A, B) applied to A is B");
        }
    }
});
