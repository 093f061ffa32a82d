//! A Kubernetes Service proxy on nftables. No arguments: node-a's rules for the bundled
//! sample cluster, printed (no root). `--kube NODE` or `FILE NODE`: applied, followed.
use kpng::nft::{NftBackend, NftConfig};
use kpng::{Proxy, ProxyConfig, Source};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]);
    let nft = NftBackend::new(NftConfig::new(proxy));
    match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => {
            let sample = Proxy::new("node-a").source(Source::sample());
            print!("{}", sample.sink(nft.dry_run()).once().await?.last_script());
        }
        [from, node] => {
            let source = match from.as_str() {
                "--kube" => Source::kube_config(kpng::kube::Config::infer().await?)?,
                file => Source::watched_file(file),
            };
            Proxy::new(node).source(source).sink(nft).run().await?;
        }
        _ => return Err("usage: minimal-nft-proxy [--kube NODE | FILE NODE]".into()),
    }
    Ok(())
}
