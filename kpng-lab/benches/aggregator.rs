//! The aggregator's figure: N producers each publish one small change
//! every 10 ms for 10 s, into real nftables in a namespace (as root).
//! Aggregated: one aggregator flushes at most every `--min-interval`
//! (default 100 ms, burst 2), in real time. Alone: each producer applies
//! each of its changes as its own transaction. Both end in the same
//! ruleset, which is checked.
//!
//! ```text
//! cargo bench -p kpng-lab --bench aggregator [-- --producers N --seconds S --min-interval-ms M]
//! ```
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use kpng_aggregator::Aggregator;
use kpng_aggregator::nft::{Fragment, Nft, TableFamily, Value, element_key};
use kpng_drive::SyncLimiter;
use kpng_lab::{Lab, unavailable};
use kpng_netfilter::nft::build::{Load, lookup};
use kpng_netfilter::nft::{BaseChain, ChainHook, ChainType, DataType, Expr, Set};
use kpng_store::MapOp;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn table(p: usize) -> String {
    format!("producer-{p}")
}

/// Producer `p`'s starting state: a table, a set, a chain using it.
fn start(p: usize) -> Fragment {
    let mut f = Fragment::new();
    let input = BaseChain {
        kind: ChainType::Filter,
        hook: ChainHook::Input,
        priority: i32::try_from(p).expect("few producers"),
    };
    // `ip saddr @peers counter`.
    let rule = [
        lookup(&[Load::Saddr(TableFamily::Ip)], "peers", None, false),
        vec![Expr::Counter],
    ]
    .concat();
    f.table(TableFamily::Inet, &table(p))
        .set(Set::new("peers", DataType::IPV4_ADDR))
        .base_chain("in", input, [rule]);
    f
}

/// Change `i` of a producer: add the i-th address, drop the one 50 back
/// (a sliding window, so the state stays small and changes each time).
fn change(p: usize, i: u64) -> Vec<MapOp<kpng_aggregator::nft::Key, Value>> {
    let addr = |n: u64| {
        let octet = |v: u64| u8::try_from(v % 256).unwrap_or(0);
        vec![10, octet(p as u64), octet(n / 256), octet(n)]
    };
    let element = Value::Element {
        data: None,
        timeout_ms: None,
    };
    let mut ops = vec![MapOp::Set(
        element_key(TableFamily::Inet, &table(p), "peers", addr(i)),
        element,
    )];
    if i >= 50 {
        ops.push(MapOp::Delete(element_key(
            TableFamily::Inet,
            &table(p),
            "peers",
            addr(i - 50),
        )));
    }
    ops
}

fn nft(lab: &Lab) -> Nft {
    Nft::new(Some(
        std::path::Path::new("/run/netns").join(lab.ns("node")),
    ))
}

fn ruleset(lab: &Lab) -> String {
    // Element order within a set is not significant: sort the lines.
    let text = lab.in_node(&["nft", "list", "ruleset"]);
    let mut lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.sort_unstable();
    lines.join("\n")
}

fn main() {
    if let Some(why) = unavailable(&["nft"]) {
        println!("SKIPPED: {why}");
        return;
    }
    let producers = usize::try_from(arg("--producers", 10)).expect("count");
    let seconds = arg("--seconds", 10);
    let min_interval = Duration::from_millis(arg("--min-interval-ms", 100));
    let ticks = seconds * 100;

    // Aggregated, in real time.
    let lab = Lab::new();
    let mut agg = Aggregator::new(nft(&lab));
    for p in 0..producers {
        agg.publish(&format!("p{p}"), start(p)).expect("start");
    }
    agg.flush();
    let before = agg.transactions();
    let mut limiter = SyncLimiter::new(min_interval, 2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut apply = Duration::ZERO;
    let mut next_flush = Instant::now();
    let begin = Instant::now();
    for i in 0..ticks {
        let tick_at = begin + Duration::from_millis(10 * i);
        std::thread::sleep(tick_at.saturating_duration_since(Instant::now()));
        for p in 0..producers {
            agg.publish_delta(&format!("p{p}"), change(p, i))
                .expect("publish");
        }
        if Instant::now() >= next_flush {
            runtime.block_on(limiter.acquire());
            let report = agg.flush();
            apply += Duration::from_micros(u64::try_from(report.apply_micros).unwrap_or(0));
            next_flush = Instant::now() + min_interval;
        }
    }
    let report = agg.flush();
    apply += Duration::from_micros(u64::try_from(report.apply_micros).unwrap_or(0));
    let wall = begin.elapsed();
    let aggregated = agg.transactions() - before;
    let final_aggregated = ruleset(&lab);
    drop(lab);

    // Alone: every change is its own transaction, as fast as the kernel
    // takes them.
    let lab = Lab::new();
    let mut alone: Vec<Aggregator<Nft>> = (0..producers)
        .map(|p| {
            let mut a = Aggregator::new(nft(&lab));
            a.publish(&format!("p{p}"), start(p)).expect("start");
            a.flush();
            a
        })
        .collect();
    let before: u64 = alone.iter().map(Aggregator::transactions).sum();
    let mut alone_apply = Duration::ZERO;
    for i in 0..ticks {
        for (p, a) in alone.iter_mut().enumerate() {
            a.publish_delta(&format!("p{p}"), change(p, i))
                .expect("publish");
            let report = a.flush();
            alone_apply += Duration::from_micros(u64::try_from(report.apply_micros).unwrap_or(0));
        }
    }
    let alone_transactions = alone.iter().map(Aggregator::transactions).sum::<u64>() - before;
    let final_alone = ruleset(&lab);
    assert_eq!(final_aggregated, final_alone, "the same final state");

    let publications = ticks * producers as u64;
    println!(
        "kpng-aggregator: {producers} producers x one change per 10 ms for {seconds} s ({publications} publications), nf_tables over netlink in a namespace"
    );
    println!(
        "aggregated (flush every {} ms, burst 2): {aggregated:>6} transactions, {:>8.0} ms applying, {:.1} s wall",
        min_interval.as_millis(),
        apply.as_secs_f64() * 1e3,
        wall.as_secs_f64()
    );
    println!(
        "each producer alone:                  {alone_transactions:>6} transactions, {:>8.0} ms applying",
        alone_apply.as_secs_f64() * 1e3
    );
    println!(
        "ratio: {:.1}x fewer transactions, {:.1}x less apply time  [>= 10x fewer; same final ruleset: checked]",
        alone_transactions as f64 / aggregated.max(1) as f64,
        alone_apply.as_secs_f64() / apply.as_secs_f64().max(1e-9)
    );
    println!(
        "{{\"producers\":{producers},\"seconds\":{seconds},\"aggregated_transactions\":{aggregated},\"aggregated_apply_ms\":{:.0},\"alone_transactions\":{alone_transactions},\"alone_apply_ms\":{:.0}}}",
        apply.as_secs_f64() * 1e3,
        alone_apply.as_secs_f64() * 1e3
    );
}
