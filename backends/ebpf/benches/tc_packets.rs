//! What a packet costs the tc ingress program, by kind, as the kernel
//! times single runs (`BPF_PROG_TEST_RUN`, one run per call on a fresh
//! copy of the packet; the median of `KPNG_BENCH_RUNS`, default 20,000,
//! per kind, the kinds interleaved). With `KPNG_BENCH_OBJECT=FILE`, the
//! same for another build of the object beside this one (e.g. main's:
//! `git show main:backends/ebpf/bpf/kpng_sock.o > /tmp/old.o`).
//!
//! `cargo bench -p kpng-backend-ebpf --bench tc_packets` (as root).

#[path = "../tests/tc_support/mod.rs"]
mod tc_support;

use tc_support::{EMPTY_DROP, EMPTY_REJECT, Loaded, endpoint, frontend, ipv4, sctp};

fn tcp(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    [
        &sport.to_be_bytes()[..],
        &dport.to_be_bytes(),
        &[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0],
    ]
    .concat()
}

/// A kind of packet: its name and its bytes.
type Kind = (&'static str, Vec<u8>);

/// The kinds of packet, each with the object's maps set for it.
fn kinds(loaded: &mut Loaded) -> Vec<Kind> {
    let client = [203, 0, 113, 10];
    let pod = [10, 244, 1, 10];
    loaded.serve(
        frontend([10, 96, 0, 80].into(), 80, 6),
        EMPTY_DROP,
        Some(endpoint(pod.into(), 8080)),
    );
    loaded.serve(
        frontend([10, 96, 0, 81].into(), 80, 132),
        EMPTY_DROP,
        Some(endpoint(pod.into(), 8080)),
    );
    loaded.serve(frontend([10, 96, 0, 82].into(), 80, 6), EMPTY_REJECT, None);
    vec![
        (
            "not a Service's (TCP ACK to 192.0.2.9)",
            ipv4(client, [192, 0, 2, 9], 6, &tcp(40000, 80, 0x10)),
        ),
        (
            "TCP of a flow, DNAT with a port change",
            ipv4(client, [10, 96, 0, 80], 6, &tcp(40001, 80, 0x10)),
        ),
        (
            "SCTP DATA of a flow, DNAT with a port change (CRC32c)",
            ipv4(client, [10, 96, 0, 81], 132, &sctp(40002, 80, false)),
        ),
        (
            "TCP SYN without endpoint (REJECT built)",
            ipv4(client, [10, 96, 0, 82], 6, &tcp(40003, 80, 0x02)),
        ),
    ]
}

fn median(mut v: Vec<u128>) -> u128 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("KPNG_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let other = std::env::var("KPNG_BENCH_OBJECT")
        .ok()
        .map(|path| std::fs::read(&path).expect("KPNG_BENCH_OBJECT"));
    let mut objects = vec![("this build", Loaded::new())];
    if let Some(bytes) = &other {
        objects.push(("KPNG_BENCH_OBJECT", Loaded::with_object(bytes)));
    }
    let mut loaded: Vec<(&str, Loaded, Vec<Kind>)> = Vec::new();
    for (name, object) in objects {
        let Some(mut object) = object else {
            return;
        };
        let kinds = kinds(&mut object);
        loaded.push((name, object, kinds));
    }
    let mut times: Vec<Vec<Vec<u128>>> = loaded
        .iter()
        .map(|(_, _, kinds)| vec![Vec::with_capacity(runs); kinds.len()])
        .collect();
    for _ in 0..runs {
        for (o, (_, object, kinds)) in loaded.iter().enumerate() {
            for (k, (_, packet)) in kinds.iter().enumerate() {
                let time = object.time("kpng_tc_ingress", packet);
                times[o][k].push(time.as_nanos());
            }
        }
    }
    for (name, object, _) in &loaded {
        for program in ["kpng_tc_ingress", "kpng_tc_egress"] {
            let count = object
                .verified(program)
                .map_or("unknown".into(), |n| n.to_string());
            println!("{name:18} {program}: {count} instructions verified (limit 1,000,000)");
        }
    }
    println!("tc ingress, ns a packet (median of {runs} runs)");
    for (o, (name, _, kinds)) in loaded.iter().enumerate() {
        for (k, (kind, _)) in kinds.iter().enumerate() {
            let t = std::mem::take(&mut times[o][k]);
            println!("{name:18} {kind:55} {:>6}", median(t));
        }
    }
}
