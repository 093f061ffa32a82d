//! The figures every backend prints: full syncs at 1k and 10k Services,
//! one endpoint change at 10k, and the new-connection rate.

use std::net::IpAddr;
use std::time::Instant;

use super::*;
use crate::{LabBackend, settle};

/// Measures backend `B` and prints its table; `refs` are the goals and
/// kube-proxy references printed in brackets: full sync at 10k, one
/// change at 10k, connection-rate ratio. `extended` adds a mixed cluster
/// and a restart at 10k (minutes each for iptables, so left out there).
pub fn run<B: LabBackend>(refs: [&str; 4], extended: bool) {
    if let Some(why) = crate::unavailable(B::TOOLS).or_else(B::unavailable) {
        println!("SKIPPED: {why}");
        return;
    }
    let lab = client_and_endpoint();

    // The data plane with 10 Services programmed.
    let (small_ms, small_commands, ..) = full_sync::<B>(&lab, 10, true);
    settle();
    // Through the Service and straight to the pod, interleaved, so that
    // the machine's drift hits both alike. For a socket-level backend the
    // kernel also counts what its programs cost per run.
    let stats = B::SOCKETS
        .then(kpng_backend_ebpf::RunTimeStats::enable)
        .and_then(Result::ok);
    warm_up(&lab);
    let (rate_10, direct_10, ratio_direct_10) = rates(&lab);
    let program_costs: Vec<String> = stats
        .iter()
        .flat_map(|s| s.programs())
        .filter(|p| p.runs > 0)
        .map(|p| format!("{} {} ns x {}", p.name, p.nanos_per_run(), p.runs))
        .collect();
    drop(stats);

    let (ms_1k, commands_1k, ..) = full_sync::<B>(&lab, 1_000, true);
    let mut extra = Vec::new();
    if extended {
        let (ms, commands, ..) = full_sync::<B>(&lab, 10_000, false);
        extra.push(format!(
            "full sync, 10k x 10 mixed (NodePorts, LBs, 13.3k ports): {ms:>7.1} ms  ({commands} commands)"
        ));
    }
    // The headline: a node's first sync, into an empty kernel.
    B::clear(&lab);
    let (ms_10k, commands_10k, mut store, mut projector, mut backend) =
        full_sync::<B>(&lab, 10_000, true);
    if extended {
        // A restart onto the same state: the rules are there already.
        let (ms, commands, .., again) = full_sync::<B>(&lab, 10_000, true);
        extra.push(format!(
            "full sync, 10k x 10 again (a restart onto the same state): {ms:>7.1} ms  ({commands} commands{})",
            match again.last_note() {
                note if note.is_empty() => String::new(),
                note => format!("; {note}"),
            }
        ));
    }
    settle();
    warm_up(&lab);
    let (rate_10k, direct_10k, ratio_direct_10k) = rates(&lab);
    let memory = backend.last_note();

    // One change at 10k: an endpoint goes not-ready, then ready again.
    let cluster = cluster(10_000, true);
    let mut change_ms = Vec::new();
    let mut change_commands = Vec::new();
    let mut notes = std::collections::BTreeMap::<String, usize>::new();
    endpoint_flips(
        &cluster,
        4999,
        &mut store,
        &mut projector,
        &mut backend,
        |ms, backend| {
            change_ms.push(ms);
            change_commands.push(backend.last_commands());
            assert!(!backend.last_full(), "incremental");
            *notes.entry(backend.last_note()).or_default() += 1;
        },
    );
    change_ms.sort_by(f64::total_cmp);
    change_commands.sort_unstable();

    // A Service with chains of its own (ClientIP affinity: a chain and a
    // set per endpoint, a spreading map) comes, then goes, at 10k.
    let (mut own_add, mut own_del) = (Vec::new(), Vec::new());
    for i in 0..10u8 {
        let endpoints: Vec<IpAddr> = (0..3u8)
            .map(|j| IpAddr::from([10, 200, i, j + 1]))
            .collect();
        let (name, ip) = (format!("sticky-{i}"), format!("10.100.1.{}", i + 1));
        let name = bench_service(&mut store, (&name, &ip, true), "node-1", &endpoints);
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), &mut backend)
            .expect("bench setup");
        own_add.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(backend.last_commands() > 0, "the Service was added");
        // Deleted as the API deletes it: the Service and its endpoints.
        let mut txn = store.begin();
        for ip in endpoints {
            txn.delete(&kpng_model::Key::Endpoint(name.clone(), ip));
        }
        txn.delete(&kpng_model::Key::Service(name));
        txn.commit();
        let start = Instant::now();
        projector
            .sync_into(&store.snapshot(), &mut backend)
            .expect("bench setup");
        own_del.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(backend.last_commands() > 0, "the Service was deleted");
        assert!(!backend.last_full(), "incremental");
    }
    own_add.sort_by(f64::total_cmp);
    own_del.sort_by(f64::total_cmp);
    let (own_add, own_del) = (own_add[own_add.len() / 2], own_del[own_del.len() / 2]);
    let change_median = change_ms[change_ms.len() / 2];
    let commands_median = change_commands[change_commands.len() / 2];

    let notes: Vec<String> = notes
        .iter()
        .filter(|(note, _)| !note.is_empty())
        .map(|(note, n)| format!("{n}/20 {note}"))
        .collect();
    let notes = notes.join(", ");
    let [full_ref, change_ref, ratio_ref, direct_ref] = refs;
    println!(
        "kpng {} backend (goals and kube-proxy references in brackets)",
        B::NAME
    );
    println!(
        "full sync,  10 services x 10 endpoints: {small_ms:>9.1} ms  ({small_commands} commands)"
    );
    println!("full sync,  1k services x 10 endpoints: {ms_1k:>9.1} ms  ({commands_1k} commands)");
    println!(
        "full sync, 10k services x 10 endpoints: {ms_10k:>9.1} ms  ({commands_10k} commands)  [{full_ref}]"
    );
    for line in &extra {
        println!("{line}");
    }
    println!(
        "one endpoint change at 10k, median of 20: {change_median:>7.3} ms  ({commands_median} commands; {notes})  [{change_ref}]"
    );
    println!(
        "a Service with chains of its own (ClientIP affinity, 3 endpoints) added at 10k, median of 10: {own_add:>7.2} ms; deleted: {own_del:.2} ms  [<= 2 ms]"
    );
    println!("new connections/s through a ClusterIP, 10 services:  {rate_10:>7.0}");
    println!("new connections/s through a ClusterIP, 10k services: {rate_10k:>7.0}");
    println!("ratio 10k / 10: {:.3}  [{ratio_ref}]", rate_10k / rate_10);
    println!(
        "through a ClusterIP / straight to the pod, 5,000 each, alternating: 10 services {ratio_direct_10:.3}, 10k services {ratio_direct_10k:.3}  ({direct_10:.0} and {direct_10k:.0}/s straight)  [{direct_ref}]"
    );
    if !program_costs.is_empty() {
        println!(
            "the programs' own cost at 10 services, mean per run (the kernel's count, through the Service and straight alike): {}",
            program_costs.join(", ")
        );
    }
    let (rss, peak) = (
        kpng_testkit::proc_status_kib(None, "VmRSS:"),
        kpng_testkit::proc_status_kib(None, "VmHWM:"),
    );
    println!(
        "memory: this process {:.1} MiB (peak {:.1} MiB; no child process); after the 10k sync: {memory}",
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    println!(
        "{{\"backend\":\"{}\",\"full_sync_ms_1k\":{ms_1k:.1},\"full_sync_ms_10k\":{ms_10k:.1},\"change_ms_10k\":{change_median:.2},\"change_commands_10k\":{commands_median},\"own_chains_add_ms_10k\":{own_add:.2},\"own_chains_delete_ms_10k\":{own_del:.2},\"conn_rate_10\":{rate_10:.0},\"conn_rate_10k\":{rate_10k:.0},\"conn_rate_ratio\":{:.3},\"via_service_vs_direct_10\":{:.3},\"via_service_vs_direct_10k\":{:.3}}}",
        B::NAME,
        rate_10k / rate_10,
        ratio_direct_10,
        ratio_direct_10k
    );
}
