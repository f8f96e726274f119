//! The shape every OS's diff has: desired × facts → one [`Item`] per desired
//! thing, each with the action that makes it right (none when it already is).
//! Diffs are pure: no I/O, unit-tested on facts alone (see `os::*::diff`).

use std::fmt;

use ipnet::Ipv4Net;
use serde::Serialize;

/// What an action says it will do, in one line, and what its being pending
/// says about the host as it is (for `verify`).
pub trait Describe {
    fn describe(&self) -> String;
    fn finding(&self) -> String {
        format!("not as desired: would {}", self.describe())
    }
}

/// One desired thing on a host, and what (if anything) must change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item<A> {
    pub key: String,
    pub action: Option<A>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff<A> {
    pub items: Vec<Item<A>>,
    pub notes: Vec<String>,
}

impl<A> Default for Diff<A> {
    fn default() -> Self {
        Diff {
            items: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl<A> Diff<A> {
    pub fn actions(&self) -> impl Iterator<Item = &A> {
        self.items.iter().filter_map(|i| i.action.as_ref())
    }
    pub fn changes(&self) -> usize {
        self.actions().count()
    }
}

/// Why nothing may be changed on a host: its facts contradict the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// The node records a pod CIDR other than the one assigned to it.
    PodCidr {
        node: String,
        /// Where the node keeps its record.
        record: &'static str,
        recorded: Ipv4Net,
        assigned: Ipv4Net,
    },
    /// The host lacks what the desired state needs (each problem in words).
    Preflight(Vec<String>),
    /// The host's pod CIDR cannot be decided (see `alloc`): why.
    Allocation(String),
    /// The host must restart before kwinctl can go on (a Windows feature
    /// installed and waiting for it): what waits, and how to go on.
    Reboot(String),
}

impl Conflict {
    /// The name of the `verify` check that reports it.
    pub fn check_name(&self) -> &'static str {
        match self {
            Conflict::PodCidr { .. } | Conflict::Allocation(_) => "pod-cidr",
            Conflict::Preflight(_) => "preflight",
            Conflict::Reboot(_) => "reboot",
        }
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::PodCidr {
                node,
                record,
                recorded,
                assigned,
            } => write!(
                f,
                "the host records pod CIDR {recorded} ({record}) but the state file assigns {assigned}; \
                 nothing was changed on it. If the state file is wrong, pin `pod_cidr: {recorded}` for {node} in the inventory; \
                 to move the node, run `kwinctl reset --limit {node}` first"
            ),
            Conflict::Preflight(problems) => write!(
                f,
                "preflight failed, nothing was changed: {}",
                problems.join("; ")
            ),
            Conflict::Allocation(why) => write!(f, "{why}"),
            Conflict::Reboot(why) => write!(f, "reboot required: {why}"),
        }
    }
}

impl std::error::Error for Conflict {}
