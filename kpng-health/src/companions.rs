//! [`Companions`]: what kube-proxy runs beside its data plane, put around
//! a backend.

use std::time::Duration;

use kpng_sink::{Sink, SinkExt};
use tokio::net::TcpListener;

use crate::{Conditions, HealthCheckServer, Healthy, ProxyHealth, serve_healthz};

/// What kube-proxy runs beside its data plane, put around a backend:
/// `/healthz` and `/livez` telling how the backend's rounds go, the
/// health-check node ports of the node view, and other sinks (conntrack
/// cleanup, say) that follow the backend: each round the backend applied
/// goes to them next ([`SinkExt::followed_by`]), and `/healthz` follows
/// the backend's rounds ([`Healthy`], a hook around it).
///
/// ```no_run
/// # async fn f(backend: impl kpng_sink::Sink + Send + 'static) -> std::io::Result<()> {
/// use std::time::Duration;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:10256").await?;
/// let sink = kpng_health::Companions::new()
///     .healthz(listener, Duration::from_secs(60))
///     .health_check_prefixes(vec!["192.168.0.0/24".parse().unwrap()])
///     .around(backend);
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct Companions {
    healthz: Option<(TcpListener, ProxyHealth)>,
    prefixes: Option<Vec<kpng_model::IpNet>>,
    followers: Vec<Box<dyn Sink + Send>>,
    conditions: Conditions,
}

impl std::fmt::Debug for Companions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Companions")
            .field("healthz", &self.healthz.as_ref().map(|(_, h)| h))
            .field("prefixes", &self.prefixes)
            .field("followers", &self.followers.len())
            .finish()
    }
}

impl Companions {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink that follows the backend: it receives each round after the
    /// backend applied it (and is skipped when the backend failed).
    #[must_use]
    pub fn follower(mut self, sink: impl Sink + Send + 'static) -> Self {
        self.followers.push(Box::new(sink));
        self
    }

    /// Serves `/healthz` and `/livez` on `listener` (unhealthy once a
    /// change waited longer than `timeout`), and the health-check node
    /// ports.
    #[must_use]
    pub fn healthz(mut self, listener: TcpListener, timeout: Duration) -> Self {
        self.healthz = Some((listener, ProxyHealth::new(timeout)));
        self
    }

    /// `/healthz` answers `503` while any of `conditions` is set (see
    /// [`Conditions`]).
    #[must_use]
    pub fn conditions(mut self, conditions: Conditions) -> Self {
        self.conditions = conditions;
        self
    }

    /// The health `/healthz` reports, once [`healthz`](Self::healthz) is
    /// set: others may add to it (a held-back input, say).
    pub fn proxy_health(&self) -> Option<ProxyHealth> {
        self.healthz.as_ref().map(|(_, health)| health.clone())
    }

    /// Serves the health-check node ports on the node's addresses within
    /// `prefixes` (`--nodeport-addresses`), following them; by default on
    /// every address.
    #[must_use]
    pub fn health_check_prefixes(mut self, prefixes: Vec<kpng_model::IpNet>) -> Self {
        self.prefixes = Some(prefixes);
        self
    }

    /// Puts them around `backend`. Spawns the servers on the current tokio
    /// runtime.
    pub fn around<S: Sink + Send + 'static>(mut self, backend: S) -> Box<dyn Sink + Send> {
        let backend = match self.healthz {
            None => backend.boxed(),
            Some((listener, health)) => {
                let health = health.with_conditions(self.conditions);
                tokio::spawn(serve_healthz(listener, health.clone()));
                let server = match self.prefixes {
                    Some(prefixes) => HealthCheckServer::on_prefixes(prefixes, health.clone()),
                    None => HealthCheckServer::new(
                        vec![std::net::Ipv4Addr::UNSPECIFIED.into()],
                        health.clone(),
                    ),
                };
                self.followers.push(Box::new(server));
                backend.with(Healthy::new(health)).boxed()
            }
        };
        if self.followers.is_empty() {
            return backend;
        }
        // The backend first: the followers act on its new rules.
        backend.followed_by(self.followers).boxed()
    }
}
