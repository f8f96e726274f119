//! What happened on each host: the data every run produces, which
//! `report` presents, `record` keeps and `--output json` prints.

use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Serialize, Serializer};

use crate::diff::Conflict;
use crate::inventory::Os;
use crate::mode::Mode;
use crate::probe::FactsError;
use crate::text::clip;
use crate::transport::TransportError;
use crate::verify::{Check, K8sView};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionStatus {
    /// `plan`: would run.
    Planned,
    /// Already right: nothing done.
    Ok,
    Changed,
    Failed,
    /// Not run because an earlier action failed or the run was interrupted.
    Skipped,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ActionReport {
    pub key: String,
    pub action: String,
    pub status: ActionStatus,
    /// Absent when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

impl ActionReport {
    /// A desired item that needed nothing.
    pub fn unchanged(key: &str) -> ActionReport {
        ActionReport {
            key: key.to_string(),
            action: format!("{key} (unchanged)"),
            status: ActionStatus::Ok,
            stderr: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HostStatus {
    Ok,
    Changed,
    Failed,
    /// `plan`: changes pending.
    Pending,
    /// Not started, or stopped between steps, because of Ctrl-C / SIGTERM;
    /// or not started because `--max-fail` hosts had failed.
    Interrupted,
}

impl fmt::Display for HostStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostStatus::Ok => "ok",
            HostStatus::Changed => "changed",
            HostStatus::Failed => "failed",
            HostStatus::Pending => "pending",
            HostStatus::Interrupted => "interrupted",
        })
    }
}

/// A remote call that did not come back with an answer.
#[derive(Debug, Clone)]
pub enum CallError {
    Transport {
        what: String,
        error: TransportError,
    },
    Timeout {
        what: String,
        host: String,
        secs: u64,
        /// The action whose own budget it was (else `--timeout`).
        budget_of: Option<String>,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Transport { what, error } => write!(f, "{what}: {error}"),
            CallError::Timeout {
                what,
                host,
                secs,
                budget_of: None,
            } => {
                write!(f, "{what}: {host} did not finish within --timeout {secs}s")
            }
            CallError::Timeout {
                what,
                host,
                secs,
                budget_of: Some(a),
            } => write!(
                f,
                "{what}: {host} did not finish within {secs}s, the budget of \"{a}\" (or --timeout, if longer)"
            ),
        }
    }
}

/// Why a host did not end well.
#[derive(Debug, Clone)]
pub enum HostError {
    /// Could not connect (after retries where they may help).
    Connect(TransportError),
    /// The probe call did not come back.
    Probe(CallError),
    /// The probe's facts are not what it promises.
    Facts(FactsError),
    /// The host's facts contradict the plan: nothing was changed on it.
    Conflict(Conflict),
    /// The apply call did not come back: the host may be partly changed.
    Apply { call: CallError, mode: Mode },
    /// An action failed; the ones after it were not run.
    ActionFailed {
        /// 0-based.
        index: usize,
        what: String,
        not_run: usize,
    },
    /// The script ended before every action reported.
    Stopped {
        done: usize,
        total: usize,
        exit: Option<u32>,
        stderr: String,
        mode: Mode,
    },
    /// The probe after applying is not valid.
    Reprobe(FactsError),
    /// Checks failed (`changed`: after applying changes).
    VerifyFailed { changed: bool },
    /// `reset` ran, yet kwinctl's changes are still there.
    ResetIncomplete,
    /// Ctrl-C / SIGTERM: `probed` when the host was probed but not changed.
    Interrupted { probed: bool },
    /// `--max-fail`: `failed` hosts had failed (`max` stops the run) before
    /// this one's turn to change; nothing was changed on it.
    NotStarted { failed: usize, max: usize },
    /// The cluster's allocation cannot be made: nothing was changed anywhere.
    Cluster(String),
    /// The changes were not made: the cluster lock was not this run's.
    Refused(String),
    /// A host outside `--limit` lacks routes the run's changes need.
    PeerRoutes(Vec<String>),
    /// `up --reboot`: the host could not be restarted, or did not come
    /// back in time (the host's matter, not kwinctl's bug).
    Restart(String),
    /// `up`: an action run detached from the connection (it drops the
    /// host's network) left no result kwinctl could read in time: whether
    /// it was done is not known.
    Detached(String),
    /// An upgrade of the node's kubelet stopped (the drain did not finish,
    /// the new kubelet did not report Ready): why, and in what state the
    /// node was left.
    Upgrade(String),
    /// `up`: the node could not join the cluster with an identity of its
    /// own (src/join/): why, and what to do.
    Join(String),
    /// `reset`: the node's own credential on the control plane (its
    /// kube-proxy's token Secret, src/join/proxy.rs) could not be revoked:
    /// why, and the command that revokes it.
    Revoke(String),
    /// kwinctl could not do its own work on this machine (the state file
    /// could not be written): nothing was changed on the host.
    Local(String),
    /// A file could not be pushed to the host: nothing was replaced; what
    /// arrived is kept for the next run to resume from.
    Push(String),
    /// A bug in kwinctl (a panicking host task).
    Internal(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Connect(e) => write!(f, "{e}"),
            HostError::Probe(e) => write!(f, "{e}"),
            HostError::Facts(e) => write!(f, "{e}"),
            HostError::Conflict(c) => write!(f, "{c}"),
            HostError::Apply { call, mode } => write!(
                f,
                "{call}; the host may be partly changed: rerun `kwinctl {mode}`"
            ),
            HostError::ActionFailed {
                index,
                what,
                not_run,
            } => write!(
                f,
                "action {} failed ({what}); the {not_run} actions after it were not run",
                index + 1
            ),
            HostError::Stopped {
                done,
                total,
                exit,
                stderr,
                mode,
            } => write!(
                f,
                "the script stopped after {done} of {total} actions (exit {exit:?}): {}; the host may be partly changed: rerun `kwinctl {mode}`",
                clip(stderr.trim(), 300)
            ),
            HostError::Reprobe(e) => write!(f, "re-probe after apply: {e}"),
            HostError::VerifyFailed { changed: false } => {
                f.write_str("verify failed (nothing needed changing)")
            }
            HostError::VerifyFailed { changed: true } => f.write_str("verify after apply failed"),
            HostError::ResetIncomplete => {
                f.write_str("kwinctl's changes are still present after reset")
            }
            HostError::Interrupted { probed: false } => f.write_str("not started: interrupted"),
            HostError::Interrupted { probed: true } => {
                f.write_str("interrupted after probing: nothing was changed")
            }
            HostError::NotStarted { failed, max } => write!(
                f,
                "not started: {failed} host{} failed, and --max-fail stops at {max}; nothing was changed on it",
                if *failed == 1 { "" } else { "s" }
            ),
            HostError::Cluster(why) => write!(f, "{why}"),
            HostError::Refused(why) => write!(f, "nothing was changed: {why}"),
            HostError::PeerRoutes(missing) => write!(
                f,
                "outside --limit, and not as the run left the cluster: it would {}. Run `kwinctl up` \
                 without --limit, or add --with-peer-routes to change only such routes",
                missing.join("; ")
            ),
            HostError::Restart(why) => write!(f, "{why}"),
            HostError::Detached(why) => write!(f, "{why}"),
            HostError::Upgrade(why) => write!(f, "{why}"),
            HostError::Join(why) => write!(f, "joining the cluster: {why}"),
            HostError::Revoke(why) => write!(f, "{why}"),
            HostError::Push(why) => write!(
                f,
                "pushing a file failed, nothing was replaced: {why}. What arrived is kept: rerun to resume"
            ),
            HostError::Local(why) => write!(
                f,
                "{why}: kwinctl could not do its own work on this machine; nothing was changed on the host"
            ),
            HostError::Internal(e) => write!(
                f,
                "internal error (please report it): {e}; the host may be partly changed"
            ),
        }
    }
}

fn as_text<S: Serializer>(e: &Option<HostError>, s: S) -> Result<S::Ok, S::Error> {
    match e {
        Some(e) => s.collect_str(e),
        None => s.serialize_none(),
    }
}

/// A file `plan` would rewrite: a unified diff from the host's copy to
/// kwinctl's, or why there is none.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FileDiff {
    pub path: String,
    pub diff: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HostReport {
    pub host: String,
    pub os: Os,
    pub address: Ipv4Addr,
    #[schemars(with = "String")]
    pub pod_cidr: Ipv4Net,
    /// The host's block is not decided (the run ended before the
    /// allocation, or the node could not be asked and the state file has
    /// none): `pod_cidr` is then only a placeholder. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pod_cidr_pending: bool,
    /// How the host was reached: `ssh user@address:port via ...`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    pub status: HostStatus,
    pub actions: Vec<ActionReport>,
    pub checks: Vec<Check>,
    /// Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// `plan`: how the files it would rewrite differ from the host's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileDiff>,
    /// Why the host failed, in words.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "as_text"
    )]
    #[schemars(with = "Option<String>")]
    pub error: Option<HostError>,
    pub seconds: f64,
    /// The control plane's view of the nodes (kubectl), when asked.
    #[serde(skip)]
    pub k8s: K8sView,
    /// `up`, a control plane: how long it waited (seconds) for the Windows
    /// nodes that changed in this run to report Ready (`None`: it did not
    /// wait).
    #[serde(skip)]
    pub k8s_waited: Option<u64>,
    /// A Windows host's Kubernetes node name (`Host::node_name`), what the
    /// control plane's view is searched for.
    #[serde(skip)]
    pub node_name: Option<String>,
}

impl HostReport {
    pub fn new(host: &str, os: Os, address: Ipv4Addr, pod_cidr: Ipv4Net) -> HostReport {
        HostReport {
            host: host.to_string(),
            os,
            address,
            pod_cidr,
            pod_cidr_pending: false,
            route: None,
            status: HostStatus::Ok,
            actions: Vec::new(),
            checks: Vec::new(),
            notes: Vec::new(),
            files: Vec::new(),
            error: None,
            seconds: 0.0,
            k8s: K8sView::NotAsked,
            k8s_waited: None,
            node_name: None,
        }
    }
    /// This report, failed for `e`.
    pub fn failed(mut self, e: HostError) -> HostReport {
        self.status = HostStatus::Failed;
        self.error = Some(e);
        self
    }
    /// This report, stopped by Ctrl-C / SIGTERM (`probed`: after probing,
    /// before changing anything).
    pub fn interrupted(mut self, probed: bool) -> HostReport {
        self.status = HostStatus::Interrupted;
        self.error = Some(HostError::Interrupted { probed });
        self
    }
    /// This report, not started because `--max-fail` was reached.
    pub fn not_started(mut self, failed: usize, max: usize) -> HostReport {
        self.status = HostStatus::Interrupted;
        self.error = Some(HostError::NotStarted { failed, max });
        self
    }
    pub fn count(&self, s: ActionStatus) -> usize {
        self.actions.iter().filter(|a| a.status == s).count()
    }
    pub fn failed_checks(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_serialize_as_before() {
        let mut r = HostReport::new(
            "w1",
            Os::Windows,
            "10.0.0.11".parse().unwrap(),
            "192.168.1.0/24".parse().unwrap(),
        )
        .failed(HostError::ActionFailed {
            index: 2,
            what: "create switch".into(),
            not_run: 4,
        });
        r.actions.push(ActionReport::unchanged("routing"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["os"], "windows");
        assert_eq!(v["address"], "10.0.0.11");
        assert_eq!(v["pod_cidr"], "192.168.1.0/24");
        assert_eq!(v["status"], "failed");
        assert_eq!(
            v["error"],
            "action 3 failed (create switch); the 4 actions after it were not run"
        );
        assert_eq!(v["actions"][0]["action"], "routing (unchanged)");
        assert!(v.get("k8s").is_none());
    }
}
