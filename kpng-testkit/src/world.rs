//! A cluster at scale, as the Kubernetes API serves it: Services,
//! EndpointSlices and Nodes as JSON objects, for the test apiserver and
//! for manifest files.
//!
//! [`World`] is deterministic and streamed: objects are made one at a
//! time, so a million endpoints can be written to a file without holding
//! them. Its mix is the one the backends bench uses, grown to scale:
//!
//! | share | what |
//! |---|---|
//! | Services 0..1,200 | a third each ClusterIP, NodePort and LoadBalancer (node ports are unique cluster-wide and the default range holds 2,768) |
//! | every 4th NodePort/LoadBalancer | `externalTrafficPolicy: Local` (a LoadBalancer one with a health-check node port) |
//! | every 4th LoadBalancer | `loadBalancerSourceRanges` |
//! | every 3rd Service | a second port, UDP 53 to 5353 |
//! | every 100th | `sessionAffinity: ClientIP` (rare in real clusters; each costs a chain per endpoint) |
//! | every 20th | `internalTrafficPolicy: Local` |
//! | every 10th | `trafficDistribution: PreferClose`, with zone hints |
//! | every 100th | dual-stack (a second, IPv6 EndpointSlice) |
//! | every 50th endpoint | not ready; every 97th terminating but serving |
//!
//! EndpointSlices hold at most 100 endpoints, as the EndpointSlice
//! controller makes them. Endpoints are spread over the nodes round-robin.
//!
//! # Example
//!
//! ```
//! use kpng_testkit::world::World;
//!
//! let world = World { services: 300, ..World::wide() };
//! let mut file = Vec::new();
//! world.write_list(&mut file).unwrap();
//! let list: serde_json::Value = serde_json::from_slice(&file).unwrap();
//! let items = list["items"].as_array().unwrap();
//! assert_eq!(items.iter().filter(|o| o["kind"] == "Service").count(), 300);
//! // 10 endpoints each, and 10 more for each of the 3 dual-stack ones.
//! assert_eq!(world.endpoints(), 3_030);
//! ```

use std::io::{self, Write};

use serde_json::{Value, json};

/// A cluster of `services` Services with `endpoints_per_service` endpoints
/// each, on `nodes` nodes in `zones` zones. `mixed: false` makes every
/// Service a ClusterIP with one TCP port (the shape of kube-proxy's
/// published figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct World {
    /// Number of Services.
    pub services: usize,
    /// Endpoints of each Service (of each address family).
    pub endpoints_per_service: usize,
    /// Number of nodes, `node-0` and up.
    pub nodes: usize,
    /// Number of zones, `zone-0` and up; nodes are spread over them.
    pub zones: usize,
    /// The mix of Service kinds and policies (see the module docs), or
    /// plain ClusterIPs.
    pub mixed: bool,
}

impl World {
    /// 100,000 Services × 10 endpoints on 1,000 nodes, mixed: a million
    /// endpoints.
    pub fn wide() -> Self {
        Self {
            services: 100_000,
            endpoints_per_service: 10,
            nodes: 1_000,
            zones: 3,
            mixed: true,
        }
    }

    /// 10,000 Services × 100 endpoints on 1,000 nodes, mixed: a million
    /// endpoints, in fewer, bigger Services.
    pub fn deep() -> Self {
        Self {
            services: 10_000,
            endpoints_per_service: 100,
            ..Self::wide()
        }
    }

    /// Looks a world up by name: `wide`, `deep`, or
    /// `SERVICESxENDPOINTS` (`50000x10`, mixed), `plain-SERVICESxENDPOINTS`
    /// (ClusterIPs only). `None` for anything else.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "wide" => return Some(Self::wide()),
            "deep" => return Some(Self::deep()),
            _ => {}
        }
        let (mixed, shape) = match name.strip_prefix("plain-") {
            Some(shape) => (false, shape),
            None => (true, name),
        };
        let (services, endpoints) = shape.split_once('x')?;
        Some(Self {
            services: services.parse().ok()?,
            endpoints_per_service: endpoints.parse().ok()?,
            mixed,
            ..Self::wide()
        })
    }

    /// Endpoints in all (IPv4 and IPv6).
    pub fn endpoints(&self) -> usize {
        (0..self.services)
            .map(|i| self.endpoints_per_service * (1 + usize::from(self.dual_stack(i))))
            .sum()
    }

    fn dual_stack(&self, i: usize) -> bool {
        self.mixed && i % 100 == 50
    }

    /// Service `i`'s namespace and name.
    pub fn service_name(i: usize) -> (String, String) {
        (format!("ns-{}", i % 200), format!("svc-{i}"))
    }

    /// Service `i`'s first ClusterIP, in 10.96.0.0/12 (room for a million).
    pub fn cluster_ip(i: usize) -> String {
        let k = i + 1;
        format!("10.{}.{}.{}", 96 + k / 65_536, (k / 256) % 256, k % 256)
    }

    /// Endpoint number `n` (counted over all Services)'s IPv4 address, in
    /// 10.128.0.0/9.
    fn endpoint_ip(n: usize) -> String {
        let n = n + 1;
        format!("10.{}.{}.{}", 128 + n / 65_536, (n / 256) % 256, n % 256)
    }

    /// Every Service, in order.
    pub fn services(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.services).map(|i| self.service(i))
    }

    /// Service number `i`.
    pub fn service(&self, i: usize) -> Value {
        let (ns, name) = Self::service_name(i);
        let ip = Self::cluster_ip(i);
        let mut ports =
            vec![json!({"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"})];
        if !self.mixed {
            ports[0] = json!({"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080});
        } else if i.is_multiple_of(3) {
            ports.push(json!({"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353}));
        }
        let kind = match i % 3 {
            _ if !self.mixed || i >= 1_200 => "ClusterIP",
            0 => "ClusterIP",
            1 => "NodePort",
            _ => "LoadBalancer",
        };
        let mut spec = json!({"type": kind, "clusterIP": ip, "clusterIPs": [ip], "ports": ports});
        let mut status = json!({});
        if kind != "ClusterIP" {
            if let Some(ports) = spec["ports"].as_array_mut() {
                for (k, p) in ports.iter_mut().enumerate() {
                    p["nodePort"] = json!(30_000 + i * 2 + k);
                }
            }
            if (i / 3).is_multiple_of(4) {
                spec["externalTrafficPolicy"] = json!("Local");
                if kind == "LoadBalancer" {
                    spec["healthCheckNodePort"] = json!(32_400 + i / 12);
                }
            }
        }
        if kind == "LoadBalancer" {
            let k = i + 1;
            let lb = format!("172.30.{}.{}", k / 256, k % 256);
            status = json!({"loadBalancer": {"ingress": [{"ip": lb}]}});
            if (i / 3) % 4 == 1 {
                spec["loadBalancerSourceRanges"] = json!(["203.0.113.0/24", "198.51.100.0/24"]);
            }
        }
        if self.mixed {
            if i % 100 == 3 {
                spec["sessionAffinity"] = json!("ClientIP");
                spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10_800}});
            }
            if i % 20 == 7 {
                spec["internalTrafficPolicy"] = json!("Local");
            }
            if i % 10 == 5 {
                spec["trafficDistribution"] = json!("PreferClose");
            }
            if self.dual_stack(i) {
                let v6 = format!("fd00:96::{:x}:{:x}", (i + 1) >> 16, (i + 1) & 0xffff);
                spec["clusterIPs"] = json!([ip, v6]);
                spec["ipFamilies"] = json!(["IPv4", "IPv6"]);
                spec["ipFamilyPolicy"] = json!("RequireDualStack");
            }
        }
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": "1", "uid": format!("svc-uid-{i}")},
            "spec": spec, "status": status})
    }

    /// Every EndpointSlice, Service by Service.
    pub fn endpoint_slices(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.services).flat_map(move |i| self.slices_of(i))
    }

    /// Service `i`'s EndpointSlices: at most 100 endpoints each, and for a
    /// dual-stack Service the same again in IPv6.
    pub fn slices_of(&self, i: usize) -> Vec<Value> {
        let (ns, name) = Self::service_name(i);
        let per = self.endpoints_per_service;
        let mut ports = vec![json!({"name": "http", "port": 8080, "protocol": "TCP"})];
        if self.mixed && i.is_multiple_of(3) {
            ports.push(json!({"name": "dns", "port": 5353, "protocol": "UDP"}));
        }
        let families: &[&str] = match self.dual_stack(i) {
            true => &["IPv4", "IPv6"],
            false => &["IPv4"],
        };
        let mut slices = Vec::new();
        for family in families {
            for (chunk, start) in (0..per).step_by(100).enumerate() {
                let endpoints: Vec<Value> = (start..(start + 100).min(per))
                    .map(|j| self.endpoint(i, j, family == &"IPv6"))
                    .collect();
                let suffix = match *family {
                    "IPv6" => format!("v6-{chunk}"),
                    _ => format!("{chunk}"),
                };
                slices.push(json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"namespace": ns, "name": format!("{name}-{suffix}"), "resourceVersion": "1",
                        "labels": {"kubernetes.io/service-name": name}},
                    "addressType": family, "endpoints": endpoints, "ports": ports}));
            }
        }
        slices
    }

    /// Endpoint `j` of Service `i`.
    fn endpoint(&self, i: usize, j: usize, v6: bool) -> Value {
        let n = i * self.endpoints_per_service + j;
        let node = n % self.nodes.max(1);
        let zone = format!("zone-{}", node % self.zones.max(1));
        let address = match v6 {
            true => format!("fd00:128::{:x}:{:x}", (n + 1) >> 16, (n + 1) & 0xffff),
            false => Self::endpoint_ip(n),
        };
        let (ready, serving, terminating) = match n {
            _ if !self.mixed => (true, true, false),
            _ if n % 50 == 49 => (false, false, false),
            _ if n % 97 == 96 => (false, true, true),
            _ => (true, true, false),
        };
        let mut endpoint = json!({"addresses": [address],
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
            "nodeName": format!("node-{node}"), "zone": zone});
        if self.mixed && i % 10 == 5 {
            endpoint["hints"] = json!({"forZones": [{"name": zone}]});
        }
        endpoint
    }

    /// Every Node, with its zone label and an InternalIP in 192.168.0.0/16.
    pub fn node_objects(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.nodes.max(1)).map(move |k| {
            let ip = format!("192.168.{}.{}", (k + 1) / 256, (k + 1) % 256);
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("node-{k}"), "resourceVersion": "1",
                    "labels": {"topology.kubernetes.io/zone": format!("zone-{}", k % self.zones.max(1)),
                        "topology.kubernetes.io/region": "region-0"}},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]}})
        })
    }

    /// Writes the world as one JSON `List`, as `kubectl get
    /// services,endpointslices,nodes -A -o json` prints it, an object at a
    /// time.
    ///
    /// # Errors
    /// When `out` fails.
    pub fn write_list(&self, out: impl Write) -> io::Result<()> {
        let mut out = io::BufWriter::with_capacity(1 << 16, out);
        out.write_all(br#"{"apiVersion":"v1","kind":"List","items":["#)?;
        let objects = self
            .services()
            .chain(self.endpoint_slices())
            .chain(self.node_objects());
        for (k, object) in objects.enumerate() {
            if k > 0 {
                out.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut out, &object)?;
        }
        out.write_all(b"]}\n")?;
        out.flush()
    }

    /// A script for the test apiserver serving this world: one list of
    /// each resource (paged by the client's `limit`, as a real apiserver
    /// does), then watches that stay open.
    #[cfg(feature = "apiserver")]
    pub fn script(&self) -> crate::apiserver::Script {
        use crate::apiserver::{Reply, Resource, Script};
        let mut script = Script::default();
        let strip = |mut v: Value| {
            // The server adds kind and apiVersion to list items.
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            v
        };
        script.push(
            Resource::Services,
            false,
            Reply::List("1".into(), self.services().map(strip).collect()),
        );
        script.push(
            Resource::EndpointSlices,
            false,
            Reply::List("1".into(), self.endpoint_slices().map(strip).collect()),
        );
        script.push(
            Resource::Nodes,
            false,
            Reply::List("1".into(), self.node_objects().map(strip).collect()),
        );
        script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_there_and_counted() {
        let world = World {
            services: 1_500,
            ..World::deep()
        };
        let services: Vec<Value> = world.services().collect();
        let count = |f: &dyn Fn(&Value) -> bool| services.iter().filter(|s| f(s)).count();
        assert_eq!(count(&|s| s["spec"]["type"] == "NodePort"), 400);
        assert_eq!(count(&|s| s["spec"]["type"] == "LoadBalancer"), 400);
        assert_eq!(
            count(&|s| s["spec"]["externalTrafficPolicy"] == "Local"),
            200
        );
        assert_eq!(count(&|s| s["spec"]["sessionAffinity"] == "ClientIP"), 15);
        assert_eq!(count(&|s| s["spec"]["ipFamilies"].is_array()), 15);
        // Node ports are unique.
        let mut ports: Vec<u64> = services
            .iter()
            .flat_map(|s| s["spec"]["ports"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| p["nodePort"].as_u64())
            .chain(
                services
                    .iter()
                    .filter_map(|s| s["spec"]["healthCheckNodePort"].as_u64()),
            )
            .collect();
        let all = ports.len();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), all);
        assert!(ports.iter().all(|p| (30_000..=32_767).contains(p)));
        // 100 endpoints a slice; the dual-stack Services have two families.
        let slices: Vec<Value> = world.endpoint_slices().collect();
        assert_eq!(slices.len(), 1_515);
        let endpoints: usize = slices
            .iter()
            .map(|s| s["endpoints"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(endpoints, world.endpoints());
        assert_eq!(endpoints, 151_500);
    }

    #[test]
    fn a_million_addresses_stay_distinct() {
        let world = World::wide();
        assert_eq!(World::cluster_ip(99_999), "10.97.134.160");
        let last = world.services * world.endpoints_per_service - 1;
        assert_eq!(World::endpoint_ip(last), "10.143.66.64");
        assert_ne!(World::endpoint_ip(65_535), World::endpoint_ip(65_534));
        assert_eq!(World::named("wide"), Some(world));
        assert_eq!(World::named("5000x50").map(|w| w.services), Some(5_000));
        assert_eq!(World::named("plain-10x2").map(|w| w.mixed), Some(false));
        assert_eq!(World::named("nonsense"), None);
    }
}
