//! The conntrack settings kube-proxy applies when it starts (its
//! `--conntrack-*` flags, the `conntrack` section of its configuration),
//! as sysctls of the network namespace the process runs in.

use std::time::Duration;

/// Where the sysctls are.
const ROOT: &str = "/proc/sys/net/netfilter";

/// kube-proxy's conntrack settings; the defaults are kube-proxy's. A zero
/// leaves that sysctl as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sysctls {
    /// `--conntrack-max-per-core`: `nf_conntrack_max` is this times the
    /// cores, at least [`min`](Self::min).
    pub max_per_core: u64,
    /// `--conntrack-min`.
    pub min: u64,
    /// `--conntrack-tcp-timeout-established`.
    pub tcp_established_timeout: Duration,
    /// `--conntrack-tcp-timeout-close-wait`.
    pub tcp_close_wait_timeout: Duration,
    /// `--conntrack-tcp-be-liberal`: out-of-window TCP packets are not
    /// marked INVALID.
    pub tcp_be_liberal: bool,
    /// `--conntrack-udp-timeout`.
    pub udp_timeout: Duration,
    /// `--conntrack-udp-timeout-stream`.
    pub udp_stream_timeout: Duration,
}

impl Default for Sysctls {
    fn default() -> Self {
        Self {
            max_per_core: 32_768,
            min: 131_072,
            tcp_established_timeout: Duration::from_secs(24 * 3600),
            tcp_close_wait_timeout: Duration::from_secs(3600),
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_stream_timeout: Duration::ZERO,
        }
    }
}

impl Sysctls {
    /// The sysctls to write on a machine with `cores` cores: names under
    /// `/proc/sys/net/netfilter`, and values.
    pub fn writes(&self, cores: u64) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        if self.max_per_core > 0 {
            let max = self.max_per_core.saturating_mul(cores).max(self.min);
            out.push(("nf_conntrack_max", max));
        }
        let seconds = [
            (
                "nf_conntrack_tcp_timeout_established",
                self.tcp_established_timeout,
            ),
            (
                "nf_conntrack_tcp_timeout_close_wait",
                self.tcp_close_wait_timeout,
            ),
            ("nf_conntrack_udp_timeout", self.udp_timeout),
            ("nf_conntrack_udp_timeout_stream", self.udp_stream_timeout),
        ];
        for (name, timeout) in seconds {
            if !timeout.is_zero() {
                out.push((name, timeout.as_secs().max(1)));
            }
        }
        if self.tcp_be_liberal {
            out.push(("nf_conntrack_tcp_be_liberal", 1));
        }
        out
    }

    /// Writes the sysctls that differ from what they hold, in the network
    /// namespace this process runs in. Returns those that could not be
    /// written, with why: `nf_conntrack_max` is read-only outside the
    /// host's namespace, as kube-proxy finds in a container, and is left
    /// then.
    pub fn apply(&self) -> Vec<(&'static str, std::io::Error)> {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as u64;
        let mut failed = Vec::new();
        for (name, value) in self.writes(cores) {
            let path = std::path::Path::new(ROOT).join(name);
            let current = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok());
            if current == Some(value) {
                continue;
            }
            match std::fs::write(&path, value.to_string()) {
                Ok(()) => tracing::info!(sysctl = name, value, "conntrack setting applied"),
                Err(error) => failed.push((name, error)),
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Sysctls;

    #[test]
    fn kube_proxys_defaults_and_zeros() {
        assert_eq!(
            Sysctls::default().writes(2),
            [
                ("nf_conntrack_max", 131_072),
                ("nf_conntrack_tcp_timeout_established", 86_400),
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
            ]
        );
        let more = Sysctls {
            udp_timeout: Duration::from_secs(45),
            tcp_be_liberal: true,
            tcp_established_timeout: Duration::ZERO,
            ..Sysctls::default()
        };
        assert_eq!(
            more.writes(8),
            [
                ("nf_conntrack_max", 262_144),
                ("nf_conntrack_tcp_timeout_close_wait", 3600),
                ("nf_conntrack_udp_timeout", 45),
                ("nf_conntrack_tcp_be_liberal", 1),
            ]
        );
    }
}
