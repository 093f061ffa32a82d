//! Maglev's consistent hashing (Eisenbud et al., NSDI 2016): a table of
//! [`SLOTS`] slots, each naming one of a Service port's endpoints, built
//! so that every endpoint holds about as many slots as the others, and
//! that an endpoint leaving (or joining) changes about its own share of
//! the slots and few others. A flow's hash picks its slot: a flow keeps
//! its endpoint while that endpoint stays, on every node alike (the table
//! depends only on the set of endpoints).
//!
//! ```
//! use kpng_model::maglev::{SLOTS, table};
//!
//! let ten: Vec<(std::net::IpAddr, u16)> =
//!     (1..=10).map(|i| (format!("10.0.0.{i}").parse().unwrap(), 8080)).collect();
//! let before = table(&ten, SLOTS);
//! assert_eq!(before.len(), SLOTS as usize);
//! // One leaves: its slots move, and few others.
//! let nine = &ten[1..];
//! let after = table(nine, SLOTS);
//! let moved = before
//!     .iter()
//!     .zip(&after)
//!     .filter(|(b, a)| ten[**b as usize] != nine[**a as usize])
//!     .count();
//! assert!(moved < SLOTS as usize * 15 / 100, "{moved}");
//! ```

use std::hash::Hasher;
use std::net::IpAddr;

/// The slots of a table: a prime, about 100 times the endpoints of a
/// common Service, so that each of 10 endpoints holds within about 1 % of
/// a tenth of the flows. A Service port's table costs this many elements
/// per address in the nftables backend.
pub const SLOTS: u32 = 1021;

/// The Maglev table of `targets` (address and port each) over `slots`
/// slots (a prime): for each slot, the index in `targets` of its
/// endpoint. Empty when `targets` is. The table depends on the set of
/// targets, not their order.
pub fn table(targets: &[(IpAddr, u16)], slots: u32) -> Vec<u32> {
    let m = u64::from(slots.max(1));
    if targets.is_empty() {
        return Vec::new();
    }
    // The order the endpoints take turns in: by their identity, so that
    // every node builds the same table from the same set.
    let mut order: Vec<usize> = (0..targets.len()).collect();
    order.sort_by_key(|&i| targets[i]);
    // Each endpoint's permutation of the slots: offset + j * skip.
    let perms: Vec<(u64, u64)> = order
        .iter()
        .map(|&i| {
            let (offset, skip) = (hash(targets[i], 0), hash(targets[i], 1));
            (offset % m, if m > 1 { skip % (m - 1) + 1 } else { 1 })
        })
        .collect();
    let mut next = vec![0u64; order.len()];
    let mut entry = vec![u32::MAX; usize::try_from(m).unwrap_or(usize::MAX)];
    let mut filled = 0u64;
    'fill: loop {
        for (turn, &i) in order.iter().enumerate() {
            let (offset, skip) = perms[turn];
            let mut slot = (offset + next[turn] * skip) % m;
            while entry[usize::try_from(slot).unwrap_or(0)] != u32::MAX {
                next[turn] += 1;
                slot = (offset + next[turn] * skip) % m;
            }
            entry[usize::try_from(slot).unwrap_or(0)] = u32::try_from(i).unwrap_or(u32::MAX);
            next[turn] += 1;
            filled += 1;
            if filled == m {
                break 'fill;
            }
        }
    }
    entry
}

/// The slot of a flow from `source` port `port` in a table of `slots`
/// slots, as the nftables rule `jhash ip saddr . th sport mod SLOTS seed
/// 0x0` computes it in the kernel: Bob Jenkins' lookup3 hash of the
/// address and the port (a 4-byte register, the port's two bytes first),
/// scaled to `slots` (`(hash * slots) >> 32`). Every node, and the eBPF
/// programs, find the same slot for a flow.
pub fn flow_slot(source: IpAddr, port: u16, slots: u32) -> u32 {
    let mut key = Vec::with_capacity(20);
    match source {
        IpAddr::V4(v4) => key.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => key.extend_from_slice(&v6.octets()),
    }
    key.extend_from_slice(&port.to_be_bytes());
    key.extend_from_slice(&[0, 0]);
    let hash = lookup3(&key, 0);
    u32::try_from((u64::from(hash) * u64::from(slots)) >> 32).unwrap_or(0)
}

/// lookup3's `hashlittle` over `key` (whose length is a multiple of 4, as
/// nft's registers are), from `seed`.
fn lookup3(key: &[u8], seed: u32) -> u32 {
    let word = |k: &[u8]| u32::from_le_bytes([k[0], k[1], k[2], k[3]]);
    let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
    let init = 0xdead_beef_u32.wrapping_add(len).wrapping_add(seed);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut k = key;
    while k.len() > 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        // mix
        a = a.wrapping_sub(c);
        a ^= c.rotate_left(4);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= a.rotate_left(6);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= b.rotate_left(8);
        b = b.wrapping_add(a);
        a = a.wrapping_sub(c);
        a ^= c.rotate_left(16);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a);
        b ^= a.rotate_left(19);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b);
        c ^= b.rotate_left(4);
        b = b.wrapping_add(a);
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    a = a.wrapping_add(word(&k[0..4]));
    if k.len() > 4 {
        b = b.wrapping_add(word(&k[4..8]));
    }
    if k.len() > 8 {
        c = c.wrapping_add(word(&k[8..12]));
    }
    // final
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(24));
    c
}

fn hash((ip, port): (IpAddr, u16), which: u64) -> u64 {
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0x6d61_676c_6576, which);
    match ip {
        IpAddr::V4(v4) => hasher.write(&v4.octets()),
        IpAddr::V6(v6) => hasher.write(&v6.octets()),
    }
    hasher.write_u16(port);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `jhash` of nft (lookup3), as the lab checks with real
    /// packets: known values of the scaled slot for a few flows.
    #[test]
    fn flow_slots_are_stable() {
        let client: IpAddr = "10.244.1.99".parse().expect("ip");
        let slots: Vec<u32> = [21_000u16, 21_001, 40_000]
            .iter()
            .map(|p| flow_slot(client, *p, SLOTS))
            .collect();
        assert!(slots.iter().all(|s| *s < SLOTS), "{slots:?}");
        // The same inputs, the same slot; another port, most likely another.
        assert_eq!(flow_slot(client, 21_000, SLOTS), slots[0]);
        assert_ne!(slots[0], slots[1]);
        let v6: IpAddr = "fd00::99".parse().expect("ip");
        assert!(flow_slot(v6, 21_000, SLOTS) < SLOTS);
    }

    fn targets(n: usize) -> Vec<(IpAddr, u16)> {
        (0..n)
            .map(|i| {
                (
                    IpAddr::from([10, 244, (i / 250) as u8, (i % 250) as u8 + 1]),
                    8080,
                )
            })
            .collect()
    }

    #[test]
    fn every_endpoint_holds_about_its_share() {
        for n in [1, 2, 3, 10, 50] {
            let t = table(&targets(n), SLOTS);
            let mut counts = vec![0usize; n];
            for &i in &t {
                counts[i as usize] += 1;
            }
            let share = SLOTS as usize / n;
            for c in counts {
                assert!(
                    c + 1 >= share && c <= share + 1,
                    "n {n}: {c} against {share}"
                );
            }
        }
    }

    #[test]
    fn the_order_of_the_endpoints_does_not_matter() {
        let mut ten = targets(10);
        let a = table(&ten, SLOTS);
        ten.reverse();
        let b = table(&ten, SLOTS);
        let named = |t: &[u32], of: &[(IpAddr, u16)]| -> Vec<(IpAddr, u16)> {
            t.iter().map(|&i| of[i as usize]).collect()
        };
        assert_eq!(named(&a, &targets(10)), named(&b, &ten));
    }

    #[test]
    fn one_leaving_moves_its_own_slots_and_few_others() {
        for n in [3, 10, 30] {
            let all = targets(n);
            let before = table(&all, SLOTS);
            for gone in 0..n {
                let rest: Vec<_> = all.iter().copied().filter(|t| *t != all[gone]).collect();
                let after = table(&rest, SLOTS);
                let (mut own, mut others) = (0, 0);
                for (b, a) in before.iter().zip(&after) {
                    let (was, now) = (all[*b as usize], rest[*a as usize]);
                    if was == all[gone] {
                        own += 1;
                    } else if was != now {
                        others += 1;
                    }
                }
                assert!(own > 0);
                // The paper's figure: a few percent of the other slots.
                assert!(
                    others * 100 <= SLOTS as usize * 6,
                    "n {n}, {gone} left: {others} other slots moved"
                );
            }
        }
    }
}
