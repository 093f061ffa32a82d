//! Per-Service connection counters (issue #28), read from the backends'
//! data planes at each scrape and named by the last synced node view.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kpng_model::v1::Protocol;
use kpng_model::view::NodeView;
use kpng_sink::traffic::{ConnectionCounters, ServicePorts};

/// The backends' counters and the view that names their Service ports.
#[derive(Default)]
pub(super) struct Traffic {
    sources: Mutex<Vec<Box<dyn ConnectionCounters>>>,
    view: Mutex<Option<NodeView>>,
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic").finish_non_exhaustive()
    }
}

/// `namespace`, `service`, `port`, `protocol`.
type PortLabels = [(&'static str, String); 4];
/// The same and `endpoint`.
type EndpointLabels = [(&'static str, String); 5];

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
        _ => "TCP",
    }
}

impl Traffic {
    pub(super) fn add(&self, source: Box<dyn ConnectionCounters>) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Whether any backend counts (the view is kept only then).
    pub(super) fn wanted(&self) -> bool {
        !self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The view the next scrapes name Service ports by (O(1): a
    /// persistent map's clone).
    pub(super) fn set_view(&self, view: &NodeView) {
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = Some(view.clone());
    }

    /// Every backend's counters, per Service port and per endpoint, for
    /// the Service ports of the view (counters of Service ports no longer
    /// in it are left out).
    pub(super) fn read(&self) -> (BTreeMap<PortLabels, u64>, BTreeMap<EndpointLabels, u64>) {
        let (mut ports, mut endpoints) = (BTreeMap::new(), BTreeMap::new());
        let Some(view) = self.view.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return (ports, endpoints);
        };
        let index = ServicePorts::of(&view);
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for source in sources.iter() {
            let rows = match source.read() {
                Ok(rows) => rows,
                Err(error) => {
                    tracing::warn!(%error, "cannot read the connection counters");
                    continue;
                }
            };
            for row in rows {
                let Some((name, port)) = index.find(&row) else {
                    continue;
                };
                let port_name = if port.name.is_empty() {
                    port.port.to_string()
                } else {
                    port.name.clone()
                };
                let labels: PortLabels = [
                    ("namespace", name.namespace().to_owned()),
                    ("service", name.name().to_owned()),
                    ("port", port_name),
                    ("protocol", protocol_name(row.protocol).to_owned()),
                ];
                let [a, b, c, d] = labels.clone();
                *endpoints
                    .entry([a, b, c, d, ("endpoint", row.endpoint.to_string())])
                    .or_default() += row.connections;
                *ports.entry(labels).or_default() += row.connections;
            }
        }
        (ports, endpoints)
    }
}

/// The collector: `kpng_service_connections_total` and
/// `kpng_endpoint_connections_total`, read at each scrape.
#[derive(Debug)]
pub(super) struct TrafficCollector(pub(super) std::sync::Arc<Traffic>);

impl prometheus_client::collector::Collector for TrafficCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        if !self.0.wanted() {
            return Ok(());
        }
        let (ports, endpoints) = self.0.read();
        let mut family = encoder.encode_descriptor(
            "kpng_service_connections",
            "New connections (UDP: flows) the data plane sent to a Service port's endpoints",
            None,
            MetricType::Counter,
        )?;
        for (labels, n) in &ports {
            ConstCounter::new(*n).encode(family.encode_family(labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kpng_endpoint_connections",
            "New connections (UDP: flows) the data plane sent to one endpoint of a Service port",
            None,
            MetricType::Counter,
        )?;
        for (labels, n) in &endpoints {
            ConstCounter::new(*n).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}
