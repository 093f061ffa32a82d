//! The netlink encoder round-trips without a kernel: arbitrary
//! transactions (every expression kind, arbitrary registers and values,
//! element runs across messages), encoded as sent and parsed back as the
//! kernel's answers are, give back what was sent. The `nft_netlink` fuzz
//! target runs the same check on fuzzer input.

#[path = "support/arbitrary_tx.rs"]
mod arbitrary_tx;

/// A small deterministic generator (xorshift), so the test needs no
/// dependency and fails the same way every time.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn arbitrary_transactions_round_trip() {
    for seed in 0..500u64 {
        let data = bytes(seed, 64 + (seed as usize * 37) % 4096);
        let tx = arbitrary_tx::transaction(&data);
        if let Err(e) = tx.verify_encoding() {
            panic!("seed {seed}: {e}");
        }
    }
}
