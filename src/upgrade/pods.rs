//! `up --verify-pods`: `verify --pods` limited to the node being upgraded,
//! once it is Ready at the new release and before it is uncordoned (issue
//! 36, item 3). One test pod pinned to the node (`spec.nodeName`, so the
//! cordon does not keep it off: the kubelet's admission weighs only
//! NoExecute taints, docs/research/upgrade.md#u11) through the control
//! plane's kubectl, checked as `verify --pods` checks it
//! (`crate::podcheck`): its IP in the node's pod CIDR and the cluster DNS.
//! A failure is the runner's to treat as a kubelet that never got Ready
//! (`run/upgrade.rs`).

use crate::podcheck::{self, NodePods, Options, Subject};
use crate::transport::Session;

/// The node's pod check: `Ok` when every check passed; else why, said for
/// the run record (each failed check with its detail).
pub async fn check(
    cp: &mut dyn Session,
    subject: &Subject,
    options: &Options,
    stop: &(dyn Fn() -> bool + Sync),
    say: &(dyn Fn(&str) + Sync),
) -> Result<(), String> {
    // 32 random bits (hex) name this check's pod and label it
    let id = crate::lock::run_id("p");
    let run = id[id.len() - 8..].to_string();
    let results = podcheck::check(cp, std::slice::from_ref(subject), options, &run, stop, say)
        .await
        .map_err(|e| format!("the pod check did not finish: {e}"))?;
    judged(&results, &subject.host)
}

/// The upgraded node's verdict among `results`.
fn judged(results: &[NodePods], host: &str) -> Result<(), String> {
    let Some(r) = results.iter().find(|r| r.host == host) else {
        return Err("the pod check returned no result for the node".into());
    };
    if r.ok {
        return Ok(());
    }
    let failed: Vec<String> = r
        .checks
        .iter()
        .filter(|c| c.ok == Some(false))
        .map(|c| format!("{} ({})", c.name, c.detail))
        .collect();
    Err(match failed.is_empty() {
        true => "no check of its test pod could be judged".into(),
        false => format!("its test pod failed: {}", failed.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podcheck::PodCheck;

    fn node(ok: bool, checks: &[(&str, Option<bool>, &str)]) -> NodePods {
        NodePods {
            host: "win1".into(),
            node: Some("win1".into()),
            pod: Some("p".into()),
            pod_ip: None,
            ok,
            checks: checks
                .iter()
                .map(|(n, ok, d)| PodCheck {
                    name: n.to_string(),
                    ok: *ok,
                    detail: d.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_verdict_names_the_failed_checks_of_the_node() {
        assert_eq!(
            judged(&[node(true, &[("ip", Some(true), "x")])], "win1"),
            Ok(())
        );
        let bad = node(
            false,
            &[
                ("ip", Some(false), "the pod is Pending after 10s"),
                ("dns", None, "host DNS"),
            ],
        );
        assert_eq!(
            judged(&[bad], "win1"),
            Err("its test pod failed: ip (the pod is Pending after 10s)".into())
        );
        assert!(judged(&[], "win1").unwrap_err().contains("no result"));
        assert!(
            judged(&[node(false, &[])], "win1")
                .unwrap_err()
                .contains("could be judged")
        );
    }
}
