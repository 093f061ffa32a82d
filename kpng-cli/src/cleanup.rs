//! `to-ebpf --cleanup`, and its dry run.

use kpng_backend_nft::{NftBackend, NftConfig};

use crate::Error;
use crate::args::EbpfArgs;

/// `to-ebpf --cleanup`: detaches the programs, removes the pins, and
/// deletes the nftables tables of `--north-south nft`.
pub(crate) fn ebpf_cleanup(ebpf: &EbpfArgs) -> Result<(), Error> {
    let pins = kpng_backend_ebpf::cleanup(&ebpf.bpf_pin_path)?;
    let tables = if ebpf.north_south == "nft" {
        NftBackend::cleanup(&NftConfig::new(ebpf.common.proxy()?))?
    } else {
        0
    };
    tracing::info!(
        pins = %ebpf.bpf_pin_path.display(),
        removed = pins,
        nft_tables = tables,
        "cleaned up"
    );
    Ok(())
}

/// `to-ebpf --cleanup --dry-run`: prints what [`ebpf_cleanup`] would
/// remove (read from the kernel and the pin directory), and removes
/// nothing.
pub(crate) fn ebpf_cleanup_dry_run(ebpf: &EbpfArgs) -> Result<(), Error> {
    let mut plan = Vec::new();
    for pinned in kpng_backend_ebpf::cleanup_plan(&ebpf.bpf_pin_path)? {
        plan.push(format!(
            "would remove the pins {} (detaching their programs)",
            pinned.display()
        ));
    }
    if ebpf.north_south == "nft" {
        for table in NftBackend::cleanup_plan(&NftConfig::new(ebpf.common.proxy()?))? {
            plan.push(format!("would delete table {table}"));
        }
    }
    if plan.is_empty() {
        plan.push(format!(
            "nothing to remove: no pins under {}{}",
            ebpf.bpf_pin_path.display(),
            if ebpf.north_south == "nft" {
                ", no table ip kpng or ip6 kpng"
            } else {
                ""
            }
        ));
    }
    println!("# dry run of --cleanup: nothing is removed");
    for line in plan {
        println!("{line}");
    }
    Ok(())
}
