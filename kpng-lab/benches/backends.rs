//! Each backend's figures, side by side in one run (as root):
//!
//! ```text
//! cargo bench -p kpng-lab --bench backends [-- nft|iptables|ebpf]
//! cargo bench -p kpng-lab --bench backends -- nft-comments
//! ```
//!
//! `nft-comments` (not part of the default run): what the comments naming
//! the Services cost the nft backend's full sync at 10k, in time and heap.
#![allow(missing_docs)]

use kpng_backend_iptables::IptablesBackend;
use kpng_backend_nft::NftBackend;
use kpng_lab::EbpfOnly;

// Counts heap bytes (a relaxed atomic add per allocation), for the
// comments' cost.
#[global_allocator]
static ALLOC: kpng_testkit::CountingAllocator = kpng_testkit::CountingAllocator;

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if only.iter().any(|o| o == "nft-comments") {
        kpng_lab::bench::comments_cost(3);
        return;
    }
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if wanted("nft") {
        kpng_lab::bench::run::<NftBackend>(
            [
                "<= 2000 ms; kube-proxy nft: ~9 min at 10k x 2",
                "<= 10 ms, O(1); kube-proxy: 141 ms",
                ">= 0.9",
                "kernel netfilter per packet",
            ],
            true,
        );
    }
    if wanted("ebpf") {
        kpng_lab::bench::run::<EbpfOnly>(
            [
                "<= 200 ms",
                "<= 0.100 ms",
                "sockets connect straight to the pod: ~1",
                ">= 0.98",
            ],
            true,
        );
    }
    if wanted("iptables") {
        kpng_lab::bench::run::<IptablesBackend>(
            [
                "kube-proxy iptables: minutes at 10k, with partial syncs after",
                "kube-proxy: rewrites the dispatch chains, O(services)",
                "O(n) per new connection: expected well under 1",
                "kernel netfilter per packet",
            ],
            false,
        );
    }
}
