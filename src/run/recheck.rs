//! `up`: a reachability check of a peer that was itself changing in this
//! run is taken again once that peer is done. Hosts change at the same
//! time, so a host may ping a peer before the peer's own script has opened
//! its firewall (a fresh Windows node answers no ping until kwinctl's rule
//! allows it, and its script may first upload a large binary): the first
//! answer is not the truth about the network. One more probe, pinging only
//! those peers, after they finished.

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
    if again.is_empty() {
        return r;
    }
    let names: BTreeSet<String> = again.iter().map(|p| p.name.to_ascii_lowercase()).collect();
    ctx.reporter.phase(
        &node.name,
        &format!("waiting for {} to finish, to ping again", names.len()),
    );
    ticket.wait_done(&names).await;
    let addresses: Vec<_> = again.iter().map(|p| p.address).collect();
    let facts = match step::probe(ctx, s, &node.name, ops, &addresses).await {
        Ok(f) => f,
        Err(_) => return r,
    };
    let reach = ops.reach(&facts);
    for p in again {
        let fresh = reach_check(&node.name, p, reach);
        if let Some(c) = r.checks.iter_mut().find(|c| c.name == fresh.name) {
            *c = fresh;
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
