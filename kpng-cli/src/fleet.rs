//! `kpng api --api ADDR fleet`: the nodes behind, from a server's fleet
//! view, then the fleet's summary.

use std::fmt::Write as _;

use kpng_model::v1::{FleetReply, FleetRequest};

use crate::Error;
use crate::args::FleetArgs;

/// Asks the server at `address` for its fleet view and prints it.
pub(crate) async fn run(address: &kpng_api::Address, args: &FleetArgs) -> Result<(), Error> {
    let request = FleetRequest {
        min_seconds_behind: args.behind.as_secs_f64(),
        all: args.all,
    };
    let reply = kpng_api::fleet_view(address, request).await?;
    let out = if args.output == "json" {
        serde_json::to_string_pretty(&reply)
            .map_err(|e| Error::Usage(format!("cannot write JSON: {e}")))?
            + "\n"
    } else {
        text(&reply)
    };
    print!("{out}");
    match (args.check, failing(&reply, args.behind.as_secs_f64())) {
        (true, n) if n > 0 => Err(Error::Check(format!(
            "{n} of {} nodes behind by at least {:?}, failing or away (fleet --check)",
            reply.nodes, args.behind
        ))),
        _ => Ok(()),
    }
}

/// The nodes listed that `--check` fails on: behind by at least
/// `seconds` (and by a revision), failing, or whose agent is away. (With
/// `--all` the nodes up to date are listed too: they do not count.)
fn failing(reply: &FleetReply, seconds: f64) -> usize {
    reply
        .listed
        .iter()
        .filter(|n| {
            (n.revisions_behind > 0 && n.seconds_behind >= seconds)
                || !n.error.is_empty()
                || n.streams == 0
        })
        .count()
}

/// One line per node listed (most behind first), then the summary.
pub(crate) fn text(reply: &FleetReply) -> String {
    let mut out = String::new();
    if reply.listed.is_empty() {
        out.push_str("no node behind\n");
    } else {
        let width = reply
            .listed
            .iter()
            .map(|n| n.node.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            out,
            "{:width$}  {:>8}  {:>8}  {:>9}  {:>9}  ERROR",
            "NODE", "APPLIED", "SENT", "REVISIONS", "SECONDS"
        );
        for node in &reply.listed {
            let mut error = node.error.clone();
            if node.streams == 0 {
                error = format!("(agent away) {error}");
            } else if !node.reporting {
                error = format!("(agent does not report) {error}");
            }
            let _ = writeln!(
                out,
                "{:width$}  {:>8}  {:>8}  {:>9}  {:>9.1}  {}",
                node.node,
                node.applied_revision,
                node.sent_revision,
                node.revisions_behind,
                node.seconds_behind,
                error.trim_end()
            );
        }
    }
    let _ = writeln!(
        out,
        "revision {}: {} nodes, {} reporting, {} up to date, {} behind, {} failing, {} away",
        reply.revision,
        reply.nodes,
        reply.reporting,
        reply.up_to_date,
        reply.behind,
        reply.failing,
        reply.away
    );
    if reply.last_change_revision > 0 {
        let _ = writeln!(
            out,
            "last change: revision {}, applied by {} of {} nodes sent it, p50 {:.3}s, p99 {:.3}s",
            reply.last_change_revision,
            reply.last_change_applied,
            reply.last_change_sent,
            reply.last_change_p50_seconds,
            reply.last_change_p99_seconds
        );
    } else {
        out.push_str("last change: none since the server started\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use kpng_model::v1::FleetNode;

    use super::*;

    #[test]
    fn the_laggards_then_the_summary() {
        let reply = FleetReply {
            revision: 12,
            nodes: 3,
            reporting: 3,
            up_to_date: 2,
            behind: 1,
            failing: 1,
            last_change_revision: 12,
            last_change_sent: 3,
            last_change_applied: 2,
            last_change_p50_seconds: 0.0125,
            last_change_p99_seconds: 0.02,
            listed: vec![FleetNode {
                node: "node-2".into(),
                sent_revision: 12,
                applied_revision: 10,
                revisions_behind: 2,
                seconds_behind: 14.26,
                error: "nft: Operation not permitted".into(),
                streams: 1,
                reporting: true,
                last_latency_seconds: 0.0,
            }],
            ..FleetReply::default()
        };
        assert_eq!(
            text(&reply),
            "NODE     APPLIED      SENT  REVISIONS    SECONDS  ERROR\n\
             node-2        10        12          2       14.3  nft: Operation not permitted\n\
             revision 12: 3 nodes, 3 reporting, 2 up to date, 1 behind, 1 failing, 0 away\n\
             last change: revision 12, applied by 2 of 3 nodes sent it, p50 0.013s, p99 0.020s\n"
        );
    }

    #[test]
    fn check_fails_on_nodes_behind_failing_or_away_not_on_those_up_to_date() {
        let node =
            |name: &str, revisions: u64, seconds: f64, error: &str, streams: u32| FleetNode {
                node: name.into(),
                revisions_behind: revisions,
                seconds_behind: seconds,
                error: error.into(),
                streams,
                reporting: true,
                ..FleetNode::default()
            };
        let mut reply = FleetReply {
            listed: vec![node("up", 0, 0.0, "", 1), node("late", 2, 3.0, "", 1)],
            ..FleetReply::default()
        };
        assert_eq!(failing(&reply, 0.0), 1);
        assert_eq!(failing(&reply, 5.0), 0, "3 s behind is under --behind 5s");
        reply
            .listed
            .push(node("refused", 0, 0.0, "nft: Operation not permitted", 1));
        reply.listed.push(node("away", 0, 0.0, "", 0));
        assert_eq!(failing(&reply, 5.0), 2);
    }
}
