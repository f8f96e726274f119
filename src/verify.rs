//! Read-only health checks: a host passes when `diff` finds nothing to do on
//! it and it can reach every other node's routable address.

use serde::Serialize;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::diff::{Conflict, Describe, Diff};
use crate::facts::Reach;
use crate::plan::NodePlan;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
}

/// Checks for any OS: one per desired item (passing when nothing is to be
/// done), plus reachability of every other node.
pub fn checks<A: Describe>(
    node: &NodePlan,
    diff: &Result<Diff<A>, Conflict>,
    reach: &BTreeMap<Ipv4Addr, Reach>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    match diff {
        Err(c) => checks.push(Check {
            name: "pod-cidr".into(),
            pass: false,
            detail: c.0.clone(),
        }),
        Ok(d) => {
            for item in &d.items {
                checks.push(Check {
                    name: item.key.clone(),
                    pass: item.action.is_none(),
                    detail: item
                        .action
                        .as_ref()
                        .map(|a| a.finding())
                        .unwrap_or_default(),
                });
            }
        }
    }
    for p in &node.peers {
        let (pass, detail) = match reach.get(&p.address) {
            Some(Reach::Ok) => (true, String::new()),
            Some(Reach::NoPing) => (
                false,
                format!(
                    "cannot test: {} has no `ping` (install iputils-ping)",
                    node.name
                ),
            ),
            Some(Reach::NoAnswer) => (
                false,
                format!(
                    "no answer to ping from {} within {} s",
                    node.name,
                    crate::render::PING_WAIT_SECS
                ),
            ),
            None => (false, "not probed".to_string()),
        };
        checks.push(Check {
            name: format!("reach {} {}", p.name, p.address),
            pass,
            detail,
        });
    }
    checks
}
