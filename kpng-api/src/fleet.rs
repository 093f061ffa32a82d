//! The fleet view: which revision each node has applied, how far behind
//! each is, and how long changes take to be programmed.
//!
//! The server knows what it sent each node (the revision of each round's
//! `sync`); each agent reports, after each round its sink applied or
//! failed, the revision it has applied and its last error
//! (`Enls/Report`). From both, and the time each store revision was
//! committed, the fleet computes per node:
//!
//! - **behind**: a round sent (or being sent) that its agent has not
//!   reported applied, or, for a node away (no stream open: its agent cut
//!   off, or stopped), a store revision newer than what it applied and
//!   took in; the **revisions behind** are the store's revision minus the
//!   applied one, the **seconds behind** the time since the oldest change
//!   it has not applied was committed (0 when up to date); an away node
//!   is never counted up to date;
//! - the **programming latency** of each applied round: applied time minus
//!   the commit time of the oldest change it carried (a histogram), and of
//!   the last change across the nodes that applied it (p50, p99).
//!
//! Rounds that are a node's whole view (a new or restarted agent, a
//! reset) are left out of the latency: a restart would otherwise count
//! the age of the whole view. Agents that do not report (older ones) are
//! listed but never counted behind. Memory: O(1) per node (nodes away
//! for [`AWAY_RETENTION`] are forgotten), the commit times of the last
//! [`COMMITS`] revisions, and the last change's latency per node.
//!
//! # Example
//!
//! What a server's fleet holds is filled by its streams and the agents'
//! reports; a report alone names a node, its revision and its error:
//!
//! ```
//! use kpng_api::Fleet;
//! use kpng_model::v1::{FleetRequest, NodeReport};
//!
//! let fleet = Fleet::new(7, 1); // server instance 7, store at revision 1
//! let report = |instance, error: &str| NodeReport {
//!     node: "node-a".into(),
//!     instance,
//!     revision: 1,
//!     error: error.into(),
//!     held_ms: 0,
//! };
//! // A report of another server instance (a restarted server) is ignored.
//! assert!(!fleet.report(&report(6, "")));
//! assert!(fleet.report(&report(7, "nft: Operation not permitted")));
//! let view = fleet.view(&FleetRequest::default());
//! assert_eq!((view.nodes, view.failing), (1, 1));
//! assert_eq!(view.listed[0].error, "nft: Operation not permitted");
//! assert!(fleet.openmetrics().contains("kpng_fleet_nodes_failing 1\n"));
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kpng_model::v1::{FleetNode, FleetReply, FleetRequest, NodeReport};

/// Commit times kept: a node's oldest unapplied change is looked up when
/// its round is sent (then kept with the node), so a window this long is
/// only needed for agents that apply part of what was sent.
pub const COMMITS: usize = 4096;
/// A node with no watch stream open this long is forgotten.
pub const AWAY_RETENTION: Duration = Duration::from_secs(600);
/// Upper bounds of the latency histogram's buckets, in seconds.
pub const LATENCY_BOUNDS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// The longest error text kept per node.
const ERROR_CHARS: usize = 512;

/// `error` cut to what the fleet view keeps of it ([`ERROR_CHARS`]
/// characters): agents send no more, so a report stays far below the
/// server's request limit whatever the sink's error says.
pub(crate) fn kept_error(mut error: String) -> String {
    if let Some((at, _)) = error.char_indices().nth(ERROR_CHARS) {
        error.truncate(at);
    }
    error
}
/// The laggards exported as labelled gauges in [`Fleet::openmetrics`].
pub const METRIC_LAGGARDS: usize = 10;

/// Asks the server at `address` for its fleet view (`Enls/Fleet`).
///
/// # Errors
/// [`Error::Unsupported`](crate::Error::Unsupported) from a server that
/// has none (an older one); the connection's or the server's error.
pub async fn fleet_view(
    address: &crate::Address,
    request: FleetRequest,
) -> Result<FleetReply, crate::Error> {
    let mut client = crate::connect(address)
        .await
        .map_err(|e| crate::Error::Unreachable {
            address: address.to_string(),
            attempts: 1,
            cause: kpng_retry::one_line(&e),
        })?;
    match client.fleet(request).await {
        Ok(reply) => Ok(reply.into_inner()),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            Err(crate::Error::Unsupported(format!(
                "the server at {address} has no fleet view (an older kpng)"
            )))
        }
        Err(status) => Err(status.into()),
    }
}

/// The fleet view of one server. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Fleet(Arc<Mutex<Inner>>);

#[derive(Debug)]
struct Inner {
    instance: u64,
    /// The store's revision.
    head: u64,
    /// (revision, commit time), oldest first.
    commits: VecDeque<(u64, Instant)>,
    nodes: HashMap<String, Record>,
    /// Rounds per bucket (the last: above every bound).
    buckets: [u64; LATENCY_BOUNDS.len() + 1],
    sum: f64,
    last: LastChange,
}

/// The newest revision sent to some node as a change.
#[derive(Debug, Default)]
struct LastChange {
    revision: u64,
    committed: Option<Instant>,
    sent: u64,
    /// Seconds from commit to applied, per node that applied it.
    latencies: Vec<f64>,
}

/// What the server knows of one node.
#[derive(Debug, Default)]
struct Record {
    streams: u32,
    /// Since when no stream is open.
    away_since: Option<Instant>,
    /// The revision of the last sync sent.
    sent: u64,
    /// The latest revision its stream has taken in (sent, or found to
    /// change nothing for it); 0: none yet.
    examined: u64,
    /// The last revision the agent reported applied.
    applied: u64,
    reporting: bool,
    error: Option<String>,
    /// The oldest change not applied: its revision and commit time, and
    /// whether the round carrying it is a whole view.
    pending: Option<Pending>,
    last_latency: f64,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    revision: u64,
    committed: Instant,
    whole: bool,
}

impl Fleet {
    /// An empty fleet of server `instance`, whose store is at `revision`.
    pub fn new(instance: u64, revision: u64) -> Self {
        Self::new_at(instance, revision, Instant::now())
    }

    pub(crate) fn new_at(instance: u64, revision: u64, now: Instant) -> Self {
        let mut commits = VecDeque::with_capacity(64);
        commits.push_back((revision, now));
        Self(Arc::new(Mutex::new(Inner {
            instance,
            head: revision,
            commits,
            nodes: HashMap::new(),
            buckets: [0; LATENCY_BOUNDS.len() + 1],
            sum: 0.0,
            last: LastChange::default(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it leaves figures, not invariants.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The store reached `revision` at `now`.
    pub(crate) fn committed(&self, revision: u64, now: Instant) {
        self.examined("", revision, now);
    }

    /// `node`'s stream takes in `revision` at `now` (it notes the
    /// revision's commit, if first: before its sync can be reported).
    pub(crate) fn examined(&self, node: &str, revision: u64, now: Instant) {
        let mut inner = self.lock();
        if revision > inner.head {
            inner.head = revision;
            if inner.commits.len() == COMMITS {
                inner.commits.pop_front();
            }
            inner.commits.push_back((revision, now));
        }
        if let Some(record) = inner.nodes.get_mut(node) {
            record.examined = record.examined.max(revision);
        }
    }

    /// A watch stream of `node` opened.
    pub(crate) fn opened(&self, node: &str, now: Instant) {
        let mut inner = self.lock();
        inner.forget_away(now);
        let record = inner.nodes.entry(node.to_owned()).or_default();
        record.streams += 1;
        record.away_since = None;
    }

    /// A watch stream of `node` closed.
    pub(crate) fn closed(&self, node: &str, now: Instant) {
        let mut inner = self.lock();
        if let Some(record) = inner.nodes.get_mut(node) {
            record.streams = record.streams.saturating_sub(1);
            if record.streams == 0 {
                record.away_since = Some(now);
            }
        }
    }

    /// A round carrying the changes since `from` (a whole view: `whole`)
    /// starts going to `node`.
    pub(crate) fn sending(&self, node: &str, from: u64, whole: bool, now: Instant) {
        let mut inner = self.lock();
        let committed = if whole {
            // A whole view is as late as its sending: its age is no lag.
            now
        } else {
            inner.commit_time(from, now)
        };
        if let Some(record) = inner.nodes.get_mut(node) {
            match &mut record.pending {
                Some(pending) => pending.whole |= whole,
                None => {
                    record.pending = Some(Pending {
                        revision: from,
                        committed,
                        whole,
                    });
                }
            }
        }
    }

    /// The sync of `revision` was queued to `node`; `changed`: the round
    /// carried changes; `whole`: it is the node's whole view.
    pub(crate) fn sent(&self, node: &str, revision: u64, changed: bool, whole: bool, now: Instant) {
        let mut inner = self.lock();
        let Some(record) = inner.nodes.get_mut(node) else {
            return;
        };
        record.sent = record.sent.max(revision);
        record.examined = record.examined.max(revision);
        if !changed || whole {
            return;
        }
        if revision > inner.last.revision {
            let committed = Some(inner.commit_time(revision, now));
            inner.last = LastChange {
                revision,
                committed,
                sent: 1,
                latencies: Vec::new(),
            };
        } else if revision == inner.last.revision {
            inner.last.sent += 1;
        }
    }

    /// An agent's report; `false` when it is ignored (of another server
    /// instance, or of a revision this store never had).
    pub fn report(&self, report: &NodeReport) -> bool {
        self.report_at(report, Instant::now())
    }

    pub(crate) fn report_at(&self, report: &NodeReport, now: Instant) -> bool {
        let mut inner = self.lock();
        if report.instance != inner.instance || report.revision > inner.head {
            return false;
        }
        // When the round ended: the report waited this long (at most a
        // minute is believed).
        let held = Duration::from_millis(u64::from(report.held_ms).min(60_000));
        let now = now.checked_sub(held).unwrap_or(now);
        let inner = &mut *inner;
        let record = inner
            .nodes
            .entry(report.node.clone())
            .or_insert_with(|| Record {
                away_since: Some(now),
                ..Record::default()
            });
        record.reporting = true;
        record.error = (!report.error.is_empty()).then(|| kept_error(report.error.clone()));
        if report.revision < record.applied {
            return true;
        }
        record.applied = report.revision;
        let Some(pending) = record.pending else {
            return true;
        };
        if report.revision < pending.revision {
            return true;
        }
        let latency = now
            .saturating_duration_since(pending.committed)
            .as_secs_f64();
        if !pending.whole {
            record.last_latency = latency;
            let bucket = LATENCY_BOUNDS
                .iter()
                .position(|b| latency <= *b)
                .unwrap_or(LATENCY_BOUNDS.len());
            inner.buckets[bucket] += 1;
            inner.sum += latency;
            let last = &mut inner.last;
            if let Some(committed) = last.committed
                && (pending.revision..=report.revision).contains(&last.revision)
            {
                last.latencies
                    .push(now.saturating_duration_since(committed).as_secs_f64());
            }
        }
        record.pending = if report.revision >= record.sent {
            None
        } else {
            // Applied part of what was sent (a whole view, say, and not
            // yet the change sent after it): the rest is still pending.
            let revision = report.revision.saturating_add(1);
            Some(Pending {
                revision,
                committed: commit_time(&inner.commits, revision, now),
                whole: false,
            })
        };
        true
    }

    /// The fleet as `request` asks for it.
    pub fn view(&self, request: &FleetRequest) -> FleetReply {
        self.view_at(request, Instant::now())
    }

    pub(crate) fn view_at(&self, request: &FleetRequest, now: Instant) -> FleetReply {
        let mut inner = self.lock();
        inner.forget_away(now);
        let mut reply = FleetReply {
            instance: inner.instance,
            revision: inner.head,
            nodes: inner.nodes.len() as u64,
            last_change_revision: inner.last.revision,
            last_change_sent: inner.last.sent,
            last_change_applied: inner.last.latencies.len() as u64,
            latency_bounds: LATENCY_BOUNDS.to_vec(),
            latency_counts: inner.buckets.to_vec(),
            latency_sum_seconds: inner.sum,
            ..FleetReply::default()
        };
        let mut latencies = inner.last.latencies.clone();
        latencies.sort_by(f64::total_cmp);
        reply.last_change_p50_seconds = percentile(&latencies, 0.50);
        reply.last_change_p99_seconds = percentile(&latencies, 0.99);
        for (name, record) in &inner.nodes {
            let node = inner.node(name, record, now);
            let behind = node.seconds_behind > 0.0 || node.revisions_behind > 0;
            reply.reporting += u64::from(record.reporting);
            reply.behind += u64::from(behind);
            // An away node is never up to date: what it holds is not
            // known, only what it last reported.
            reply.up_to_date += u64::from(record.reporting && !behind && record.streams > 0);
            reply.failing += u64::from(record.error.is_some());
            reply.away += u64::from(record.streams == 0);
            let listed = request.all
                || (behind && node.seconds_behind >= request.min_seconds_behind)
                || record.error.is_some()
                || record.streams == 0;
            if listed {
                reply.listed.push(node);
            }
        }
        reply.listed.sort_by(|a, b| {
            b.seconds_behind
                .total_cmp(&a.seconds_behind)
                .then(b.revisions_behind.cmp(&a.revisions_behind))
                .then(a.node.cmp(&b.node))
        });
        reply
    }

    /// The fleet's figures in the OpenMetrics text format (without the
    /// closing `# EOF`), for `/metrics`: counts, the latency histogram,
    /// the last change's p50 and p99, the worst lag, and the lag of the
    /// [`METRIC_LAGGARDS`] nodes most behind (no more: a label per node
    /// would be 10,000 series).
    pub fn openmetrics(&self) -> String {
        use std::fmt::Write as _;
        let reply = self.view(&FleetRequest::default());
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, value: f64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            );
        };
        gauge(
            "kpng_fleet_revision",
            "The server's store revision.",
            reply.revision as f64,
        );
        gauge(
            "kpng_fleet_nodes",
            "Nodes known to the server (a watch stream open, or recently).",
            reply.nodes as f64,
        );
        gauge(
            "kpng_fleet_nodes_reporting",
            "Nodes whose agent reports the revision it applied.",
            reply.reporting as f64,
        );
        gauge(
            "kpng_fleet_nodes_behind",
            "Reporting nodes that have not applied all they were sent.",
            reply.behind as f64,
        );
        gauge(
            "kpng_fleet_nodes_failing",
            "Nodes whose last round failed.",
            reply.failing as f64,
        );
        gauge(
            "kpng_fleet_nodes_away",
            "Nodes with no watch stream open.",
            reply.away as f64,
        );
        let worst = reply.listed.first();
        gauge(
            "kpng_fleet_max_seconds_behind",
            "The most seconds any node is behind.",
            worst.map_or(0.0, |n| n.seconds_behind),
        );
        gauge(
            "kpng_fleet_max_revisions_behind",
            "The most revisions any node is behind.",
            reply
                .listed
                .iter()
                .map(|n| n.revisions_behind)
                .max()
                .unwrap_or(0) as f64,
        );
        gauge(
            "kpng_fleet_last_change_revision",
            "The last change: the newest revision sent to some node.",
            reply.last_change_revision as f64,
        );
        gauge(
            "kpng_fleet_last_change_p50_seconds",
            "Median programming latency of the last change across the nodes that applied it.",
            reply.last_change_p50_seconds,
        );
        gauge(
            "kpng_fleet_last_change_p99_seconds",
            "99th percentile programming latency of the last change across the nodes that applied it.",
            reply.last_change_p99_seconds,
        );
        let name = "kpng_fleet_programming_latency_seconds";
        let _ = write!(
            out,
            "# HELP {name} From a change's commit in the server's store to a node's agent reporting it applied, per applied round (whole views excluded).\n# TYPE {name} histogram\n"
        );
        let mut cumulative = 0;
        for (bound, count) in LATENCY_BOUNDS.iter().zip(&reply.latency_counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += reply.latency_counts.last().copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", reply.latency_sum_seconds);
        let _ = writeln!(out, "{name}_count {cumulative}");
        let name = "kpng_fleet_laggard_seconds_behind";
        let _ = write!(
            out,
            "# HELP {name} Seconds behind of the {METRIC_LAGGARDS} nodes most behind.\n# TYPE {name} gauge\n"
        );
        for node in reply
            .listed
            .iter()
            .filter(|n| n.seconds_behind > 0.0)
            .take(METRIC_LAGGARDS)
        {
            let label = node.node.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "{name}{{node=\"{label}\"}} {}", node.seconds_behind);
        }
        out
    }

    /// Nodes known (for tests and figures).
    pub fn len(&self) -> usize {
        self.lock().nodes.len()
    }

    /// No node is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    fn commits_kept(&self) -> usize {
        self.lock().commits.len()
    }
}

impl Inner {
    /// When `revision` was committed: that of the first revision at or
    /// after it that was seen (revisions committed together merge), `now`
    /// when none was (not seen yet), the oldest kept when it is older.
    fn commit_time(&self, revision: u64, now: Instant) -> Instant {
        commit_time(&self.commits, revision, now)
    }

    fn forget_away(&mut self, now: Instant) {
        self.nodes.retain(|_, r| {
            r.away_since
                .is_none_or(|since| now.saturating_duration_since(since) < AWAY_RETENTION)
        });
    }

    fn node(&self, name: &str, record: &Record, now: Instant) -> FleetNode {
        // What it lacks: what was sent it and not applied, or revisions
        // its stream has not taken in yet (the server is behind on it, or
        // it is away: the store moved on without it, and what it holds is
        // no newer than what it applied).
        let seen = record.examined.max(record.applied);
        let unsent = (seen > 0 && seen < self.head).then(|| self.commit_time(seen + 1, now));
        let oldest = match (record.pending.map(|p| p.committed), unsent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .filter(|_| record.reporting);
        FleetNode {
            node: name.to_owned(),
            sent_revision: record.sent,
            applied_revision: record.applied,
            revisions_behind: oldest.map_or(0, |_| self.head.saturating_sub(record.applied).max(1)),
            seconds_behind: oldest
                .map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64()),
            error: record.error.clone().unwrap_or_default(),
            streams: record.streams,
            reporting: record.reporting,
            last_latency_seconds: record.last_latency,
        }
    }
}

/// See [`Inner::commit_time`].
fn commit_time(commits: &VecDeque<(u64, Instant)>, revision: u64, now: Instant) -> Instant {
    let at = commits.partition_point(|(r, _)| *r < revision);
    commits.get(at).map_or(now, |(_, t)| *t)
}

/// The nearest-rank percentile `q` of sorted `values` (0 when empty).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u64 = 7;

    fn report(node: &str, revision: u64, error: &str) -> NodeReport {
        NodeReport {
            node: node.into(),
            instance: I,
            revision,
            error: error.into(),
            held_ms: 0,
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn node<'a>(reply: &'a FleetReply, name: &str) -> &'a FleetNode {
        reply
            .listed
            .iter()
            .find(|n| n.node == name)
            .unwrap_or_else(|| panic!("{name} not listed: {reply:?}"))
    }

    /// Nodes a, b, c at revision 1, each having applied its whole view.
    fn three(t0: Instant) -> Fleet {
        let fleet = Fleet::new_at(I, 1, t0);
        for n in ["a", "b", "c"] {
            fleet.opened(n, t0);
            fleet.sending(n, 1, true, t0);
            fleet.sent(n, 1, true, true, t0);
            assert!(fleet.report_at(&report(n, 1, ""), t0 + secs(0.5)));
        }
        fleet
    }

    fn change(fleet: &Fleet, revision: u64, nodes: &[&str], at: Instant) {
        fleet.committed(revision, at);
        for n in nodes {
            fleet.sending(n, revision, false, at);
            fleet.sent(n, revision, true, false, at);
        }
    }

    #[test]
    fn lag_in_revisions_and_seconds_and_latency_of_the_last_change() {
        let t0 = Instant::now();
        let fleet = three(t0);
        let all = FleetRequest {
            all: true,
            ..FleetRequest::default()
        };
        let reply = fleet.view_at(&all, t0 + secs(1.0));
        assert_eq!(
            (reply.nodes, reply.reporting, reply.up_to_date, reply.behind),
            (3, 3, 3, 0)
        );
        // Whole views count in no latency.
        assert_eq!(reply.latency_counts.iter().sum::<u64>(), 0);

        let t1 = t0 + secs(10.0);
        change(&fleet, 2, &["a", "b", "c"], t1);
        fleet.report_at(&report("a", 2, ""), t1 + secs(0.1));
        fleet.report_at(&report("b", 2, ""), t1 + secs(0.3));
        // c stalls; a second change reaches a and b only so far.
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(4.0));
        assert_eq!((reply.up_to_date, reply.behind), (2, 1));
        assert_eq!(reply.listed.len(), 1, "{reply:?}");
        let c = node(&reply, "c");
        assert_eq!(
            (c.sent_revision, c.applied_revision, c.revisions_behind),
            (2, 1, 1)
        );
        assert!((c.seconds_behind - 4.0).abs() < 1e-6, "{c:?}");
        // The last change: sent to 3, applied by 2, p50 0.1 s, p99 0.3 s.
        assert_eq!(reply.last_change_revision, 2);
        assert_eq!((reply.last_change_sent, reply.last_change_applied), (3, 2));
        assert!((reply.last_change_p50_seconds - 0.1).abs() < 1e-6);
        assert!((reply.last_change_p99_seconds - 0.3).abs() < 1e-6);

        // Revision 3 commits (c's stream is stuck: nothing more sent to
        // it); its lag in revisions grows, in seconds it counts from 2.
        change(&fleet, 3, &["a", "b"], t1 + secs(5.0));
        fleet.report_at(&report("a", 3, ""), t1 + secs(5.2));
        fleet.report_at(&report("b", 3, ""), t1 + secs(5.2));
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(6.0));
        let c = node(&reply, "c");
        assert_eq!(c.revisions_behind, 2);
        assert!((c.seconds_behind - 6.0).abs() < 1e-6, "{c:?}");
        // Listed only from 7 s behind: not yet.
        let later = FleetRequest {
            min_seconds_behind: 7.0,
            ..FleetRequest::default()
        };
        assert!(fleet.view_at(&later, t1 + secs(6.0)).listed.is_empty());

        // c catches up with one round of 2..=3 at 8 s: latency from 2's
        // commit; it is up to date, and the histogram has every round.
        fleet.sending("c", 3, false, t1 + secs(7.9));
        fleet.sent("c", 3, true, false, t1 + secs(7.9));
        fleet.report_at(&report("c", 3, ""), t1 + secs(8.0));
        let reply = fleet.view_at(&all, t1 + secs(9.0));
        assert_eq!((reply.up_to_date, reply.behind), (3, 0));
        assert!((node(&reply, "c").last_latency_seconds - 8.0).abs() < 1e-6);
        // a and b at 2 and at 3, c at 2..=3: 5 rounds applied.
        assert_eq!(reply.latency_counts.iter().sum::<u64>(), 5);
        assert!((reply.latency_sum_seconds - 8.8).abs() < 1e-6);
        // The last change (3) reached all three: 0.2, 0.2 and 3 s.
        assert_eq!((reply.last_change_sent, reply.last_change_applied), (3, 3));
        assert!((reply.last_change_p99_seconds - 3.0).abs() < 1e-6);
        let text = fleet.openmetrics();
        assert!(text.contains("kpng_fleet_nodes 3\n"), "{text}");
        assert!(
            text.contains("kpng_fleet_programming_latency_seconds_count 5\n"),
            "{text}"
        );
        assert!(
            text.contains("kpng_fleet_programming_latency_seconds_bucket{le=\"0.1\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn a_revision_the_server_has_not_sent_a_node_yet_counts_behind() {
        let t0 = Instant::now();
        let fleet = three(t0);
        // Revision 2 committed; a's stream has taken it in (nothing for
        // a), b's not yet: b is behind by the server, from 2's commit.
        fleet.committed(2, t0 + secs(1.0));
        fleet.examined("a", 2, t0 + secs(1.0));
        fleet.examined("c", 2, t0 + secs(1.0));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(1.5));
        assert_eq!(
            (reply.up_to_date, reply.behind, reply.listed.len()),
            (2, 1, 1)
        );
        let b = node(&reply, "b");
        assert_eq!(
            (b.applied_revision, b.sent_revision, b.revisions_behind),
            (1, 1, 1)
        );
        assert!((b.seconds_behind - 0.5).abs() < 1e-6, "{b:?}");
        fleet.examined("b", 2, t0 + secs(2.0));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(2.0));
        assert_eq!((reply.up_to_date, reply.behind), (3, 0));
        // A stream's first look notes a revision's commit before the
        // clock does: its sync's report is taken.
        fleet.examined("a", 3, t0 + secs(3.0));
        fleet.sending("a", 3, false, t0 + secs(3.0));
        fleet.sent("a", 3, true, false, t0 + secs(3.0));
        assert!(fleet.report_at(&report("a", 3, ""), t0 + secs(3.1)));
    }

    /// A node cut off (its stream closed, as the server's keepalive
    /// closes it) while the store moves on is behind by what the store
    /// has and it has not applied, in revisions and from the first such
    /// revision's commit; never up to date, even before the store moves;
    /// caught up once it is back and has applied the rest.
    #[test]
    fn an_away_node_is_behind_by_what_the_store_has_then_caught_up() {
        let t0 = Instant::now();
        let fleet = three(t0);
        fleet.closed("c", t0 + secs(1.0));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(2.0));
        assert_eq!(
            (reply.up_to_date, reply.behind, reply.away),
            (2, 0, 1),
            "{reply:?}"
        );
        // Two revisions while it is away: a and b take them in.
        change(&fleet, 2, &["a", "b"], t0 + secs(3.0));
        change(&fleet, 3, &["a", "b"], t0 + secs(4.0));
        for n in ["a", "b"] {
            fleet.report_at(&report(n, 3, ""), t0 + secs(4.1));
        }
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(6.0));
        assert_eq!(
            (reply.up_to_date, reply.behind, reply.away),
            (2, 1, 1),
            "{reply:?}"
        );
        let c = node(&reply, "c");
        assert_eq!(
            (c.applied_revision, c.revisions_behind, c.streams),
            (1, 2, 0)
        );
        assert!((c.seconds_behind - 3.0).abs() < 1e-6, "{c:?}");
        let text = fleet.openmetrics();
        assert!(text.contains("kpng_fleet_nodes_behind 1\n"), "{text}");

        // Back: it resumes from 1 and applies 2..=3.
        let t1 = t0 + secs(10.0);
        fleet.opened("c", t1);
        fleet.examined("c", 3, t1);
        fleet.sending("c", 2, false, t1);
        fleet.sent("c", 3, true, false, t1);
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(0.1));
        assert_eq!((reply.behind, reply.away), (1, 0));
        fleet.report_at(&report("c", 3, ""), t1 + secs(0.2));
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(0.5));
        assert_eq!(
            (
                reply.up_to_date,
                reply.behind,
                reply.away,
                reply.listed.len()
            ),
            (3, 0, 0, 0),
            "{reply:?}"
        );
    }

    #[test]
    fn a_report_that_waited_dates_its_round_back() {
        let t0 = Instant::now();
        let fleet = three(t0);
        change(&fleet, 2, &["a"], t0 + secs(1.0));
        // Applied at 1.2 s, reported at 1.9 s after waiting 700 ms.
        let mut late = report("a", 2, "");
        late.held_ms = 700;
        assert!(fleet.report_at(&late, t0 + secs(1.9)));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(2.0));
        assert!((reply.latency_sum_seconds - 0.2).abs() < 1e-6, "{reply:?}");
        assert!((reply.last_change_p50_seconds - 0.2).abs() < 1e-6);
    }

    #[test]
    fn a_whole_view_reported_after_the_next_change_was_sent_leaves_that_change_counted() {
        let t0 = Instant::now();
        let fleet = Fleet::new_at(I, 1, t0);
        fleet.opened("a", t0);
        fleet.sending("a", 1, true, t0);
        fleet.sent("a", 1, true, true, t0);
        // Revision 2 is sent before the whole view's report arrives.
        change(&fleet, 2, &["a"], t0 + secs(1.0));
        fleet.report_at(&report("a", 1, ""), t0 + secs(1.1));
        fleet.report_at(&report("a", 2, ""), t0 + secs(1.3));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(2.0));
        assert_eq!((reply.last_change_sent, reply.last_change_applied), (1, 1));
        assert!(
            (reply.last_change_p50_seconds - 0.3).abs() < 1e-6,
            "{reply:?}"
        );
        assert_eq!(reply.latency_counts.iter().sum::<u64>(), 1);
    }

    #[test]
    fn an_error_is_kept_to_its_first_characters_whole() {
        let long = "é".repeat(70_000);
        let kept = kept_error(long);
        assert_eq!(kept.chars().count(), ERROR_CHARS);
        assert!(kept.len() < 64 * 1024);
        assert_eq!(kept_error("short".into()), "short");
    }

    #[test]
    fn a_failing_node_is_listed_with_its_error_and_stays_behind() {
        let t0 = Instant::now();
        let fleet = three(t0);
        change(&fleet, 2, &["a", "b", "c"], t0 + secs(1.0));
        fleet.report_at(&report("a", 2, ""), t0 + secs(1.1));
        fleet.report_at(&report("b", 2, ""), t0 + secs(1.1));
        fleet.report_at(
            &report("c", 1, "nft: Operation not permitted"),
            t0 + secs(1.2),
        );
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(3.0));
        assert_eq!((reply.behind, reply.failing), (1, 1));
        let c = node(&reply, "c");
        assert_eq!(c.error, "nft: Operation not permitted");
        assert_eq!(c.revisions_behind, 1);
        // It recovers: the error goes.
        fleet.report_at(&report("c", 2, ""), t0 + secs(4.0));
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(5.0));
        assert_eq!((reply.behind, reply.failing, reply.listed.len()), (0, 0, 0));
    }

    #[test]
    fn an_agent_restart_is_no_latency_and_a_previous_servers_reports_are_ignored() {
        let t0 = Instant::now();
        let fleet = three(t0);
        change(&fleet, 2, &["a", "b", "c"], t0 + secs(1.0));
        for n in ["a", "b", "c"] {
            fleet.report_at(&report(n, 2, ""), t0 + secs(1.5));
        }
        // c's agent restarts an hour later: a new stream, its whole view.
        let t1 = t0 + secs(3600.0);
        fleet.closed("c", t1);
        let reply = fleet.view_at(&FleetRequest::default(), t1);
        assert_eq!((reply.away, node(&reply, "c").streams), (1, 0));
        fleet.opened("c", t1 + secs(1.0));
        fleet.sending("c", 2, true, t1 + secs(1.0));
        // Behind while its whole view goes, counted from the sending.
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(3.0));
        assert!((node(&reply, "c").seconds_behind - 2.0).abs() < 1e-6);
        fleet.sent("c", 2, true, true, t1 + secs(3.0));
        fleet.report_at(&report("c", 2, ""), t1 + secs(3.5));
        let reply = fleet.view_at(&FleetRequest::default(), t1 + secs(4.0));
        assert_eq!((reply.behind, reply.away), (0, 0));
        // Only the three rounds of revision 2: no hour-long latency.
        assert_eq!(reply.latency_counts.iter().sum::<u64>(), 3);
        assert!(reply.latency_sum_seconds < 2.0);

        // A restarted server is another instance: reports of the old one's
        // revisions (here "99", and an old instance) change nothing.
        let new = Fleet::new_at(I + 1, 1, t1);
        new.opened("a", t1);
        new.sending("a", 1, true, t1);
        new.sent("a", 1, true, true, t1);
        assert!(!new.report_at(&report("a", 99, ""), t1 + secs(0.1)));
        let reply = new.view_at(
            &FleetRequest {
                all: true,
                ..Default::default()
            },
            t1 + secs(1.0),
        );
        let a = node(&reply, "a");
        assert_eq!((a.applied_revision, a.reporting), (0, false));
        // Not reporting yet: not counted behind.
        assert_eq!((reply.behind, reply.reporting), (0, 0));
        // A revision this store never had is ignored too.
        let mut future = report("a", 5, "");
        future.instance = I + 1;
        assert!(!new.report_at(&future, t1 + secs(0.2)));
        future.revision = 1;
        assert!(new.report_at(&future, t1 + secs(0.2)));
        let reply = new.view_at(&FleetRequest::default(), t1 + secs(1.0));
        assert_eq!((reply.up_to_date, reply.behind), (1, 0));
    }

    #[test]
    fn memory_is_bounded_per_revision_and_away_nodes_are_forgotten() {
        let t0 = Instant::now();
        let fleet = three(t0);
        for r in 2..(COMMITS as u64 * 3) {
            fleet.committed(r, t0 + secs(r as f64 * 0.001));
        }
        assert_eq!(fleet.commits_kept(), COMMITS);
        // A node far behind keeps its oldest change's commit time itself.
        fleet.sending("a", 2, false, t0);
        let reply = fleet.view_at(&FleetRequest::default(), t0 + secs(100.0));
        assert!(node(&reply, "a").seconds_behind > 90.0);
        fleet.closed("b", t0 + secs(100.0));
        assert_eq!(fleet.len(), 3);
        let _ = fleet.view_at(&FleetRequest::default(), t0 + secs(100.0) + AWAY_RETENTION);
        assert_eq!(fleet.len(), 2);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99)), (50.0, 99.0));
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
