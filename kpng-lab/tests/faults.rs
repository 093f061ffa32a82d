//! Faults on the link between the server and its agents, with real
//! packets: the server in a namespace of its own on the fabric, serving
//! TCP with mutual TLS, three nodes' agents connecting across the fabric
//! (see `kpng_lab::cluster`, `serve_over_fabric`), and on that path 5 %
//! loss, 200 ms of delay each way, a cut of a third of the nodes for
//! 30 s, and a connection that goes silent. Each test prints what it
//! measured (`--nocapture`). Run as root with the `kpng` binary built
//! (`cargo build -p kpng-cli`); otherwise it prints SKIPPED and passes
//! (not root) or fails naming the missing binary.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use kpng_lab::cluster::{AgentBackend, Cluster, pod_ip};
use kpng_lab::endpoints;
use kpng_lab::scenarios::service;
use kpng_model::v1::{FleetNode, FleetReply};

/// How long the cluster may take to converge after a change: the file
/// source looks every second and waits 0.5 s for the file to settle; an
/// agent cut off retries at most every 10 s.
const CONVERGE: Duration = Duration::from_secs(30);

const BACKEND: AgentBackend = AgentBackend::Nft;

fn ep(k: usize) -> String {
    pod_ip(k, 0)
}

/// The Service `web` (ClusterIP 10.96.0.10:80) on pod 0 of these nodes.
fn web(nodes: &[usize]) -> String {
    let items: Vec<String> = nodes
        .iter()
        .map(|&k| format!("{{addresses: [{}], nodeName: node-{k}}}", ep(k)))
        .collect();
    service(
        "web",
        "{clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}",
        &format!("[{}]", items.join(", ")),
    )
}

/// Three nodes of two pods, the server on the fabric (through the relay
/// holding each chunk `relay` when given), `web` on every node's pod 0,
/// every agent synced.
fn started(relay: Option<Duration>) -> Cluster {
    let mut cluster = Cluster::new(3, 2, BACKEND);
    cluster.serve_over_fabric();
    cluster.write_manifest(&cluster.manifest(&[web(&[1, 2, 3])]));
    cluster.start_server();
    if let Some(delay) = relay {
        cluster.start_relay(delay);
    }
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    wait_serving(&cluster, &[1, 2, 3], &[1, 2, 3]);
    cluster
}

/// Waits until 20 connections to `web` from pod 1 of each node in
/// `nodes` reach exactly the pods 0 of `want`.
fn wait_serving(cluster: &Cluster, nodes: &[usize], want: &[usize]) {
    let want: BTreeSet<String> = want.iter().map(|&k| ep(k)).collect();
    let deadline = Instant::now() + CONVERGE;
    for &k in nodes {
        loop {
            let lines = cluster.connect(&cluster.pod_ns(k, 1), "tcp", "10.96.0.10", 80, 20);
            if endpoints(&lines) == want && lines.len() == 20 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-{k} never reached {want:?}: {lines:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Writes the manifest with `web` on `nodes`; the server's reload: its
/// time and revision.
fn change(cluster: &mut Cluster, nodes: &[usize]) -> (SystemTime, u64) {
    let at = cluster.write_manifest(&cluster.manifest(&[web(nodes)]));
    cluster.wait_reload(at, CONVERGE)
}

/// Waits until the agents of `nodes` have synced `revision` (or later);
/// when each did.
fn wait_synced(
    cluster: &Cluster,
    nodes: &[usize],
    revision: u64,
    timeout: Duration,
) -> Vec<SystemTime> {
    let deadline = Instant::now() + timeout;
    loop {
        let times: Vec<Option<SystemTime>> = nodes
            .iter()
            .map(|&k| {
                let agent = cluster.agent(k).expect("the agent runs");
                agent
                    .synced()
                    .into_iter()
                    .find(|(_, r)| *r >= revision)
                    .map(|(at, _)| at)
            })
            .collect();
        if times.iter().all(Option::is_some) {
            return times.into_iter().flatten().collect();
        }
        assert!(
            Instant::now() < deadline,
            "not every node of {nodes:?} synced revision {revision} within {timeout:?}: {times:?}\n{}",
            nodes
                .iter()
                .map(|&k| format!("node-{k}:\n{}", cluster.agent(k).expect("runs").log_text()))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn secs(later: SystemTime, earlier: SystemTime) -> f64 {
    later
        .duration_since(earlier)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Polls the fleet view until `ok`, for at most `timeout`.
fn fleet_until(
    cluster: &Cluster,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&FleetReply) -> bool,
) -> FleetReply {
    let deadline = Instant::now() + timeout;
    loop {
        let fleet = cluster.fleet();
        if ok(&fleet) {
            return fleet;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet view never showed {what} within {timeout:?}: {fleet:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn node(fleet: &FleetReply, k: usize) -> Option<&FleetNode> {
    let name = format!("node-{k}");
    fleet.listed.iter().find(|n| n.node == name)
}

fn all_up_to_date(fleet: &FleetReply, revision: u64) -> bool {
    fleet.revision >= revision && fleet.nodes == 3 && fleet.up_to_date == 3 && fleet.behind == 0
}

/// The first line of node `k`'s agent log at or after `since` that
/// contains `text`: its time.
fn logged(cluster: &Cluster, k: usize, text: &str, since: SystemTime) -> Option<SystemTime> {
    cluster
        .agent(k)?
        .log()
        .into_iter()
        .filter(|l| l.text.contains(text))
        .filter_map(|l| l.at)
        .find(|at| *at >= since)
}

/// 5 % of the API's packets dropped, each way: five changes in a row
/// reach every node, each node's kernel serves the last, and the fleet
/// view says every node is up to date.
#[test]
fn five_percent_loss_the_fleet_converges_on_every_change() {
    kpng_lab::require_cluster!(BACKEND);
    let mut cluster = started(None);
    cluster.faults(5, &[]);
    let sets: [&[usize]; 5] = [&[1, 2], &[2, 3], &[1, 3], &[3], &[1, 2, 3]];
    let mut latencies = Vec::new();
    let mut revision = 0;
    for set in sets {
        let (reloaded, r) = change(&mut cluster, set);
        revision = r;
        let times = wait_synced(&cluster, &[1, 2, 3], revision, CONVERGE);
        let slowest = times.iter().map(|t| secs(*t, reloaded)).fold(0.0, f64::max);
        latencies.push(slowest);
    }
    wait_serving(&cluster, &[1, 2, 3], &[1, 2, 3]);
    fleet_until(&cluster, "every node up to date", CONVERGE, |f| {
        all_up_to_date(f, revision)
    });
    println!(
        "5 % loss: server reload to the last node synced, per change: {}",
        latencies
            .iter()
            .map(|s| format!("{s:.3} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Every chunk between the agents and the server held 200 ms each way (a
/// relay): the agents connect, three changes reach every node, and no
/// keepalive gives up a connection that is slow but alive.
#[test]
fn two_hundred_ms_of_delay_the_fleet_converges() {
    kpng_lab::require_cluster!(BACKEND);
    let connected = SystemTime::now();
    let mut cluster = started(Some(Duration::from_millis(200)));
    let mut latencies = Vec::new();
    for set in [&[1, 2][..], &[2, 3], &[1, 2, 3]] {
        let (reloaded, revision) = change(&mut cluster, set);
        let times = wait_synced(&cluster, &[1, 2, 3], revision, CONVERGE);
        latencies.push(times.iter().map(|t| secs(*t, reloaded)).fold(0.0, f64::max));
        wait_serving(&cluster, &[1, 2, 3], set);
    }
    // Slow is not dead: the keepalive gave up no connection.
    for k in 1..=3 {
        assert_eq!(
            logged(&cluster, k, "lost ENLS watch", connected),
            None,
            "node-{k} lost its watch under delay:\n{}",
            cluster.agent(k).expect("runs").log_text()
        );
    }
    println!(
        "200 ms each way: server reload to the last node synced, per change: {}",
        latencies
            .iter()
            .map(|s| format!("{s:.3} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// node-3 (a third of the nodes) cut off from the server for 30 s, no
/// reset: its kernel keeps serving through `web` with the endpoints it
/// had; the server finds it away (its keepalive), and a change made
/// meanwhile reaches nodes 1 and 2 while the fleet view lists node-3
/// behind by it, in revisions and seconds, and not up to date; its agent
/// finds the connection dead (its keepalive) and retries; after the heal
/// every node converges and the fleet view is all up to date again.
#[test]
fn a_cut_third_keeps_serving_is_shown_behind_and_converges_after_the_heal() {
    kpng_lab::require_cluster!(BACKEND);
    let mut cluster = started(None);
    fleet_until(&cluster, "every node up to date", CONVERGE, |f| {
        all_up_to_date(f, 0)
    });
    let cut = Instant::now();
    let cut_at = SystemTime::now();
    cluster.faults(0, &[3]);
    // Real packets through a Service on the cut node still flow, to every
    // endpoint (node 3's pod reaching pods on nodes 1 and 2 crosses the
    // fabric, not the server).
    wait_serving(&cluster, &[3], &[1, 2, 3]);

    // The server's keepalive ends node-3's stream: away.
    let away = fleet_until(&cluster, "node-3 away", Duration::from_secs(25), |f| {
        node(f, 3).is_some_and(|n| n.streams == 0)
    });
    let away_after = cut.elapsed().as_secs_f64();
    assert_eq!(away.up_to_date, 2, "{away:#?}");

    // A change while node-3 is away: nodes 1 and 2 take it.
    let (reloaded, revision) = change(&mut cluster, &[2, 3]);
    wait_synced(&cluster, &[1, 2], revision, CONVERGE);
    wait_serving(&cluster, &[1, 2], &[2, 3]);
    // node-3 keeps serving what it had, the removed endpoint included.
    wait_serving(&cluster, &[3], &[1, 2, 3]);
    // Agents report a round within `report_spread` (1 s) of it: wait
    // for nodes 1 and 2's reports too.
    let fleet = fleet_until(
        &cluster,
        "node-3 behind, the others up to date",
        Duration::from_secs(5),
        |f| {
            node(f, 3).is_some_and(|n| n.revisions_behind >= 1 && n.seconds_behind > 0.0)
                && f.up_to_date == 2
        },
    );
    let n3 = node(&fleet, 3).expect("listed");
    assert!(n3.applied_revision < revision, "{n3:?}");
    assert_eq!(
        (fleet.up_to_date, fleet.behind, fleet.away),
        (2, 1, 1),
        "{fleet:#?}"
    );
    println!(
        "cut: `kpng api … fleet` during it:\n{}",
        cluster.fleet_command(&[])
    );
    println!(
        "cut: the server saw node-3 away {away_after:.1} s after the cut; during it: node-3 \
         {} rev / {:.1} s behind, {} of 3 up to date",
        n3.revisions_behind, n3.seconds_behind, fleet.up_to_date
    );
    // The agent's keepalive found the dead connection.
    let lost = logged(&cluster, 3, "lost ENLS watch", cut_at).unwrap_or_else(|| {
        panic!(
            "node-3's agent never gave up its dead connection:\n{}",
            cluster.agent(3).expect("runs").log_text()
        )
    });

    // Heal after 30 s.
    let remaining = Duration::from_secs(30).saturating_sub(cut.elapsed());
    std::thread::sleep(remaining);
    cluster.faults(0, &[]);
    let healed = SystemTime::now();
    let synced = wait_synced(&cluster, &[3], revision, CONVERGE)[0];
    wait_serving(&cluster, &[1, 2, 3], &[2, 3]);
    let fleet = fleet_until(&cluster, "every node up to date", CONVERGE, |f| {
        all_up_to_date(f, revision)
    });
    assert_eq!(fleet.away, 0);
    println!(
        "cut: node-3's agent lost its watch {:.1} s after the cut; heal to node-3 synced {:.2} s \
         (change made {:.1} s before the heal)",
        secs(lost, cut_at),
        secs(synced, healed),
        secs(healed, reloaded)
    );
}

/// The relay goes silent (it accepts, holds every connection open and
/// forwards nothing, as a peer that vanished without a reset): every
/// agent's keepalive gives its connection up and it retries; once the
/// relay forwards again, a change reaches every node.
#[test]
fn a_silent_connection_is_found_by_keepalive_and_the_agent_reconnects() {
    kpng_lab::require_cluster!(BACKEND);
    let mut cluster = started(Some(Duration::ZERO));
    let silent_at = SystemTime::now();
    cluster.relay_silent();
    let deadline = Instant::now() + CONVERGE;
    let mut found = Vec::new();
    for k in 1..=3 {
        loop {
            if let Some(at) = logged(&cluster, k, "lost ENLS watch", silent_at) {
                found.push(secs(at, silent_at));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-{k}'s agent still waits on its silent connection:\n{}",
                cluster.agent(k).expect("runs").log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let forward_at = SystemTime::now();
    cluster.relay_forward();
    let (_, revision) = change(&mut cluster, &[1, 3]);
    let times = wait_synced(&cluster, &[1, 2, 3], revision, CONVERGE);
    wait_serving(&cluster, &[1, 2, 3], &[1, 3]);
    println!(
        "silent: found by keepalive {} s after the silence; forwarding again to every node synced \
         {:.2} s",
        found
            .iter()
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        times
            .iter()
            .map(|t| secs(*t, forward_at))
            .fold(0.0, f64::max)
    );
}
