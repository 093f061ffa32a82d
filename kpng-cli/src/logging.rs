//! The log: `tracing` to stderr, its level from kube-proxy's `--v` (klog's
//! verbosity) unless `RUST_LOG` is set, and colour only on a terminal.

use std::io::IsTerminal as _;

/// The `tracing` filter for klog's verbosity `v` (kube-proxy's `--v`):
///
/// | `--v` | filter | what shows |
/// |---|---|---|
/// | none, 0, 1 | `kpng=info,warn` | kpng's info, every crate's warnings |
/// | 2, 3 | `kpng=debug,info` | kpng's debug, every crate's info |
/// | 4, 5 | `kpng=trace,info` | kpng's trace |
/// | 6 and up | `kpng=trace,debug` | every crate's debug (the Kubernetes client's requests, as klog shows them from 6) |
///
/// Below 6, the Kubernetes client's request log
/// (`kube_client::client::builder`) is off: its `ERROR failed with error
/// client error (Connect)` repeated, without the address, each failure
/// that the API source logs whole.
pub(crate) fn filter_for(v: Option<u8>) -> &'static str {
    match v.unwrap_or(0) {
        0 | 1 => "kpng=info,warn,kube_client::client::builder=off",
        2 | 3 => "kpng=debug,info,kube_client::client::builder=off",
        4 | 5 => "kpng=trace,info,kube_client::client::builder=off",
        _ => "kpng=trace,debug",
    }
}

/// Starts the log: `RUST_LOG` when it is set (it wins), else the level
/// of `--v`; ANSI colour only when stderr is a terminal, so a file or a
/// container log holds plain text.
pub(crate) fn init(v: Option<u8>) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.is_empty() => tracing_subscriber::EnvFilter::new(text),
        _ => tracing_subscriber::EnvFilter::new(filter_for(v)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use super::filter_for;

    #[test]
    fn klog_verbosity_maps_to_tracing_levels() {
        let quiet = ",kube_client::client::builder=off";
        assert_eq!(filter_for(None), format!("kpng=info,warn{quiet}"));
        assert_eq!(filter_for(Some(0)), format!("kpng=info,warn{quiet}"));
        assert_eq!(filter_for(Some(2)), format!("kpng=debug,info{quiet}"));
        assert_eq!(filter_for(Some(4)), format!("kpng=trace,info{quiet}"));
        assert_eq!(filter_for(Some(9)), "kpng=trace,debug");
    }
}
