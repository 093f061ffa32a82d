//! A cluster as kubectl prints it: `kubectl get
//! services,endpointslices,nodes -A -o yaml --show-managed-fields`, as one
//! `List` or as one document an object, and the same cluster as kubectl's
//! JSON. Shared by the tests and the `yaml` bench.
//!
//! Objects carry what kubectl prints: labels, annotations (a Service's
//! `kubectl.kubernetes.io/last-applied-configuration`, a block scalar),
//! managed fields, owner references, target references, timestamps and
//! quoted numbers. Keys are sorted and sequences are not indented under
//! their key, as kubectl's YAML writer does.
#![allow(dead_code)]

use serde_json::{Map, Value, json};

/// The cluster's shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cluster {
    /// How many Services (each with one EndpointSlice).
    pub(crate) services: usize,
    /// Endpoints in each Service's slice.
    pub(crate) endpoints: usize,
    /// Nodes (endpoints are spread over them).
    pub(crate) nodes: usize,
}

impl Cluster {
    /// `services` Services of `endpoints` endpoints, on 100 nodes.
    pub(crate) fn new(services: usize, endpoints: usize) -> Self {
        Cluster {
            services,
            endpoints,
            nodes: 100,
        }
    }

    /// Every object, in kubectl's order (Services, then slices, then
    /// Nodes), to `each`.
    pub(crate) fn each_object(&self, mut each: impl FnMut(Value)) {
        for i in 0..self.services {
            each(service(i));
        }
        for i in 0..self.services {
            each(slice(i, self.endpoints, self.nodes));
        }
        for n in 0..self.nodes {
            each(node(n));
        }
    }

    /// kubectl's YAML: one `List` document.
    pub(crate) fn yaml_list(&self) -> String {
        let mut out = String::from("apiVersion: v1\nitems:\n");
        self.each_object(|o| write_seq_item(&mut out, &o, 0));
        out.push_str("kind: List\nmetadata:\n  resourceVersion: \"\"\n");
        out
    }

    /// The same objects, one document each, every one after `---`.
    pub(crate) fn yaml_documents(&self) -> String {
        let mut out = String::new();
        self.each_object(|o| {
            out.push_str("---\n");
            write_map(&mut out, as_map(&o), 0, false);
        });
        out
    }

    /// kubectl's JSON: one `List`.
    pub(crate) fn json_list(&self) -> String {
        let mut out = String::from("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n");
        let mut first = true;
        self.each_object(|o| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
            out.push_str(&serde_json::to_string_pretty(&o).expect("json"));
        });
        out.push_str(
            "\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\"resourceVersion\": \"\"}\n}\n",
        );
        out
    }
}

fn ns(i: usize) -> String {
    format!("team-{}", i % 50)
}

fn uid(kind: u32, i: usize) -> String {
    format!(
        "{kind:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i >> 16,
        i & 0xfff,
        (i >> 4) & 0xfff,
        i * 2654435761 % (1 << 48)
    )
}

fn cluster_ip(i: usize) -> String {
    let n = i + 10;
    format!("10.96.{}.{}", (n >> 8) & 255, n & 255)
}

fn stamp(i: usize) -> String {
    format!(
        "2026-11-{:02}T{:02}:{:02}:{:02}Z",
        1 + i % 28,
        i % 24,
        i % 60,
        (i / 60) % 60
    )
}

/// A Service as kubectl prints one applied with `kubectl apply`.
pub(crate) fn service(i: usize) -> Value {
    let (ns, name) = (ns(i), format!("svc-{i}"));
    let applied = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"annotations": {}, "labels": {"app": name}, "name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                 "selector": {"app": name}}});
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n"),
            },
            "creationTimestamp": stamp(i),
            "labels": {"app": name, "app.kubernetes.io/part-of": "shop", "tier": "backend"},
            "managedFields": [{
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                        "f:labels": {".": {}, "f:app": {}, "f:app.kubernetes.io/part-of": {}, "f:tier": {}},
                    },
                    "f:spec": {
                        "f:internalTrafficPolicy": {},
                        "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                        "f:selector": {},
                        "f:sessionAffinity": {},
                        "f:type": {},
                    },
                },
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "time": stamp(i),
            }],
            "name": name,
            "namespace": ns,
            "resourceVersion": (1000 + i).to_string(),
            "uid": uid(1, i),
        },
        "spec": {
            "clusterIP": cluster_ip(i),
            "clusterIPs": [cluster_ip(i)],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "selector": {"app": name},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    })
}

/// Service `i`'s EndpointSlice, as the EndpointSlice controller writes it.
pub(crate) fn slice(i: usize, endpoints: usize, nodes: usize) -> Value {
    let (ns, svc) = (ns(i), format!("svc-{i}"));
    let eps: Vec<Value> = (0..endpoints)
        .map(|j| {
            let n = i * endpoints + j + 1;
            let pod = format!("{svc}-7d9f8b6c5d-{j:05}");
            json!({
                "addresses": [format!("10.{}.{}.{}", 128 + (n >> 16), (n >> 8) & 255, n & 255)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("node-{}", n % nodes.max(1)),
                "targetRef": {"kind": "Pod", "name": pod, "namespace": ns, "uid": uid(3, n)},
                "zone": format!("zone-{}", n % 3),
            })
        })
        .collect();
    json!({
        "addressType": "IPv4",
        "apiVersion": "discovery.k8s.io/v1",
        "endpoints": eps,
        "kind": "EndpointSlice",
        "metadata": {
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": stamp(i)},
            "creationTimestamp": stamp(i),
            "generateName": format!("{svc}-"),
            "generation": 3,
            "labels": {
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                "kubernetes.io/service-name": svc,
            },
            "managedFields": [{
                "apiVersion": "discovery.k8s.io/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:addressType": {},
                    "f:endpoints": {},
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:endpoints.kubernetes.io/last-change-trigger-time": {}},
                        "f:generateName": {},
                        "f:labels": {".": {}, "f:endpointslice.kubernetes.io/managed-by": {}, "f:kubernetes.io/service-name": {}},
                        "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", uid(1, i)): {}},
                    },
                    "f:ports": {},
                },
                "manager": "kube-controller-manager",
                "operation": "Update",
                "time": stamp(i),
            }],
            "name": format!("{svc}-x{:04}", i % 10_000),
            "namespace": ns,
            "ownerReferences": [{"apiVersion": "v1", "blockOwnerDeletion": true, "controller": true,
                                 "kind": "Service", "name": svc, "uid": uid(1, i)}],
            "resourceVersion": (500_000 + i).to_string(),
            "uid": uid(2, i),
        },
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// A Node, with its addresses (the rest of its status left out).
pub(crate) fn node(n: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "labels": {"kubernetes.io/hostname": format!("node-{n}"), "kubernetes.io/os": "linux",
                       "topology.kubernetes.io/zone": format!("zone-{}", n % 3)},
            "name": format!("node-{n}"),
            "resourceVersion": (9_000_000 + n).to_string(),
            "uid": uid(4, n),
        },
        "spec": {"podCIDR": format!("10.244.{n}.0/24"), "podCIDRs": [format!("10.244.{n}.0/24")]},
        "status": {"addresses": [
            {"address": format!("192.168.{}.{}", n / 250, 1 + n % 250), "type": "InternalIP"},
            {"address": format!("node-{n}"), "type": "Hostname"}]},
    })
}

fn as_map(v: &Value) -> &Map<String, Value> {
    v.as_object().expect("an object")
}

/// A string as kubectl's YAML writer spells it: plain where that reads
/// back as the same string, else double-quoted.
fn scalar(s: &str) -> String {
    // What would read back as a number or a timestamp is quoted.
    let timestamp = s.len() >= 10 && s.as_bytes()[4] == b'-' && s[..4].parse::<u16>().is_ok();
    let special = s.is_empty()
        || s.parse::<f64>().is_ok()
        || timestamp
        || s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
        || s.ends_with(' ')
        || s.contains(": ")
        || s.contains(" #")
        || matches!(
            s,
            "true" | "false" | "null" | "~" | "yes" | "no" | "on" | "off" | "True" | "False"
        );
    if special {
        serde_json::to_string(s).expect("string")
    } else {
        s.to_owned()
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A map's entries at `indent`; the first on the current line when
/// `inline` (after a sequence's `- `).
fn write_map(out: &mut String, map: &Map<String, Value>, indent: usize, inline: bool) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for (n, key) in keys.into_iter().enumerate() {
        if n > 0 || !inline {
            pad(out, indent);
        }
        out.push_str(&scalar(key));
        out.push(':');
        write_value(out, &map[key], indent);
    }
}

/// A value after its key (`key:` already written at `indent`).
fn write_value(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Object(m) if m.is_empty() => out.push_str(" {}\n"),
        Value::Object(m) => {
            out.push('\n');
            write_map(out, m, indent + 2, false);
        }
        Value::Array(a) if a.is_empty() => out.push_str(" []\n"),
        Value::Array(a) => {
            out.push('\n');
            for item in a {
                write_seq_item(out, item, indent);
            }
        }
        Value::String(s) if s.contains('\n') => {
            out.push_str(if s.ends_with('\n') { " |\n" } else { " |-\n" });
            for line in s.lines() {
                pad(out, indent + 2);
                out.push_str(line);
                out.push('\n');
            }
        }
        Value::String(s) => {
            out.push(' ');
            out.push_str(&scalar(s));
            out.push('\n');
        }
        other => {
            out.push(' ');
            out.push_str(&other.to_string());
            out.push('\n');
        }
    }
}

/// One sequence item at `indent` (kubectl does not indent a sequence
/// under its key).
fn write_seq_item(out: &mut String, v: &Value, indent: usize) {
    pad(out, indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push_str("- ");
            write_map(out, m, indent + 2, true);
        }
        Value::String(s) => {
            out.push_str("- ");
            out.push_str(&scalar(s));
            out.push('\n');
        }
        other => {
            out.push_str("- ");
            out.push_str(&other.to_string());
            out.push('\n');
        }
    }
}
