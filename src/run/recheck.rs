//! `up`: a reachability check of a peer that was itself changing in this
//! run is taken again once that peer is done. Hosts change at the same
//! time, so a host may ping a peer before the peer's own script has opened
//! its firewall (a fresh Windows node answers no ping until kwinctl's rule
//! allows it, and its script may first upload a large binary): the first
//! answer is not the truth about the network. One more probe, pinging only
//! those peers, after they finished. A peer that failed in this run is
//! not held against the host that could not ping it.

use std::collections::BTreeSet;

use super::coordinate::Ticket;
use super::{Ctx, step};
use crate::alloc::Node;
use crate::os::NodeOps;
use crate::outcome::{HostError, HostReport, HostStatus};
use crate::transport::Session;
use crate::verify::{Pinged, reach_check};

pub(super) async fn recheck<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    probed: &[Pinged],
    ticket: &Ticket<'_>,
    mut r: HostReport,
) -> HostReport {
    let Some(HostError::VerifyFailed { changed }) = r.error else {
        return r;
    };
    let changing = ticket.changing();
    let again: Vec<&Pinged> = probed
        .iter()
        .filter(|p| changing.contains(&p.name.to_ascii_lowercase()))
        .filter(|p| {
            let name = format!("reach {} {}", p.name, p.address);
            r.checks.iter().any(|c| c.name == name && !c.pass)
        })
        .collect();
    if !again.is_empty() {
        let names: BTreeSet<String> = again.iter().map(|p| p.name.to_ascii_lowercase()).collect();
        ctx.reporter.phase(
            &node.name,
            &format!("waiting for {} to finish, to ping again", names.len()),
        );
        ticket.wait_done(&names).await;
        let addresses: Vec<_> = again.iter().map(|p| p.address).collect();
        if let Ok(facts) = step::probe(ctx, s, &node.name, ops, &addresses).await {
            let reach = ops.reach(&facts);
            for p in again {
                let fresh = reach_check(&node.name, p, reach);
                if let Some(c) = r.checks.iter_mut().find(|c| c.name == fresh.name) {
                    *c = fresh;
                }
            }
        }
    }
    // A peer that failed in this run (its own error says why: it did not
    // answer, or stopped before opening its firewall) does not fail this
    // host for not answering its ping.
    let failed = ticket.failed_hosts();
    for p in probed {
        let name = format!("reach {} {}", p.name, p.address);
        if !failed.contains(&p.name.to_ascii_lowercase()) {
            continue;
        }
        if let Some(c) = r.checks.iter_mut().find(|c| c.name == name && !c.pass) {
            c.pass = true;
            c.detail = format!("not judged: {} failed in this run ({})", p.name, c.detail);
            r.notes.push(format!(
                "{} did not answer its ping, and failed in this run itself: not counted against {}",
                p.name, node.name
            ));
        }
    }
    if r.failed_checks().next().is_none() {
        r.status = if changed {
            HostStatus::Changed
        } else {
            HostStatus::Ok
        };
        r.error = None;
    }
    r
}
