//! The nf_tables netlink encoder round-trips without a kernel: a
//! transaction made from the input (every expression kind, arbitrary
//! registers and values, elements in runs across messages) is encoded as
//! it is sent and parsed back as the kernel's answers are, and must give
//! back its rules and elements.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../kpng-netfilter/tests/support/arbitrary_tx.rs"]
mod arbitrary_tx;

fuzz_target!(|data: &[u8]| {
    let tx = arbitrary_tx::transaction(data);
    if let Err(e) = tx.verify_encoding() {
        panic!("{e}");
    }
});
