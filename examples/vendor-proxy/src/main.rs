//! A vendor's Service proxy, built on the `kpng` crate alone.
//!
//! - its own data plane ([`Routes`], here a table of lines it prints);
//! - kpng's nftables rules and the vendor's firewall, two producers of one
//!   aggregator, applied as one transaction;
//! - kube-proxy's companions: `/healthz` and the health-check node ports.
//!
//! `cargo run` (in this directory) syncs node-a of the bundled sample
//! cluster once, as a dry run: the aggregator prints its transaction and
//! nothing is programmed. `cargo run -- FILE NODE` reads a manifest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kpng::aggregator::nft::{Fragment, Nft, TableFamily};
use kpng::aggregator::{Aggregator, Publisher};
use kpng::health::{Companions, Conditions};
use kpng::netfilter::nft::build::{Load, equals, verdict};
use kpng::netfilter::nft::{BaseChain, ChainHook, ChainType, NfVerdict};
use kpng::nft::{NftBackend, NftConfig};
use kpng::{GuardConfig, IpFamily, Proxy, ProxyConfig, Round, Sink, SinkError, SinkExt, Source};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The vendor's own data plane: a line per Service port and address.
struct Routes;

impl Sink for Routes {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        for change in round.services() {
            let Some(service) = change.after else {
                println!("routes: remove {}", change.name);
                continue;
            };
            let plan = service.plan(IpFamily::V4);
            for port in &plan.ports {
                for vip in plan.cluster_ips {
                    let to: Vec<_> = port
                        .cluster
                        .iter()
                        .map(|(ip, p)| format!("{ip}:{p}"))
                        .collect();
                    println!(
                        "routes: {vip}:{}/{} -> [{}]",
                        port.number,
                        port.protocol,
                        to.join(" ")
                    );
                }
            }
        }
        Ok(())
    }
}

/// The vendor's firewall: its own table, beside kpng's.
fn firewall() -> Fragment {
    let mut fragment = Fragment::new();
    let input = BaseChain {
        kind: ChainType::Filter,
        hook: ChainHook::Input,
        priority: 0,
    };
    let source = equals(Load::Saddr(TableFamily::Ip), &[192, 0, 2, 66]);
    let drop = [source, verdict(NfVerdict::Drop)].concat();
    fragment
        .table(TableFamily::Inet, "vendor-firewall")
        .base_chain("input", input, [drop]);
    fragment
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (source, node) = match args.as_slice() {
        [] => (Source::sample(), "node-a"),
        [file, node] => (Source::file(file), node.as_str()),
        _ => return Err("usage: vendor-proxy [FILE NODE]".into()),
    };

    // One aggregator, two producers: a dry run prints what it would apply.
    let aggregator = Arc::new(Mutex::new(Aggregator::new(Nft::dry_run())));
    if let Ok(mut aggregator) = aggregator.lock() {
        aggregator.publish("vendor-firewall", firewall())?;
    }
    let config = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]);
    let services = Publisher::new(
        NftBackend::new(NftConfig::new(config)),
        "kpng",
        aggregator.clone(),
    );

    // /healthz on loopback, health-check node ports on loopback addresses.
    let healthz = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let healthz_address = healthz.local_addr()?;
    let conditions = Conditions::default();
    let sink = Companions::new()
        .healthz(healthz, Duration::from_secs(60))
        .conditions(conditions.clone())
        .health_check_prefixes(vec!["127.0.0.0/8".parse()?])
        .around(services.followed_by(Routes));

    Proxy::new(node)
        .source(source)
        .sink(sink)
        // A round that would delete most of what is programmed waits.
        .guarded(GuardConfig::default())
        .conditions(conditions)
        .once()
        .await?;

    if let Ok(aggregator) = aggregator.lock() {
        println!("aggregator: {} transaction(s):", aggregator.transactions());
        print!("{}", aggregator.subsystem().last_script());
    }
    let mut http = tokio::net::TcpStream::connect(healthz_address).await?;
    http.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await?;
    let mut answer = String::new();
    http.read_to_string(&mut answer).await?;
    println!("healthz: {}", answer.lines().next().unwrap_or("no answer"));
    Ok(())
}
