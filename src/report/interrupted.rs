//! The line an interrupted run ends with.

use crate::outcome::{HostReport, HostStatus};

/// The line an interrupted run ends with: the hosts that completed (ok or
/// changed), those that failed (a failed host did not complete), and that
/// the others were not started.
pub(super) fn interrupted_line(reports: &[HostReport]) -> String {
    let names = |want: &[HostStatus]| -> String {
        let v: Vec<&str> = reports
            .iter()
            .filter(|r| want.contains(&r.status))
            .map(|r| r.host.as_str())
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    };
    let mut line = format!(
        "\nINTERRUPTED: completed hosts: {}",
        names(&[HostStatus::Ok, HostStatus::Changed])
    );
    if reports.iter().any(|r| r.status == HostStatus::Failed) {
        line.push_str(&format!("; failed: {}", names(&[HostStatus::Failed])));
    }
    line.push_str("; the others were not started");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports() -> Vec<HostReport> {
        super::super::tests::reports()
    }

    /// A host that failed is not "completed" (issue 38: after a SIGINT every host was
    /// failed, and all were listed as completed).
    #[test]
    fn an_interrupted_run_names_completed_and_failed_hosts_apart() {
        let rs = reports();
        assert_eq!(
            interrupted_line(&rs),
            "\nINTERRUPTED: completed hosts: worker-00, worker-01; failed: worker-02; the others \
             were not started"
        );
        let mut all_failed = rs.clone();
        for r in &mut all_failed {
            r.status = HostStatus::Failed;
        }
        let line = interrupted_line(&all_failed);
        assert!(line.starts_with("\nINTERRUPTED: completed hosts: none; failed: worker-00, "));
        assert_eq!(
            interrupted_line(&rs[..2]),
            "\nINTERRUPTED: completed hosts: worker-00, worker-01; the others were not started"
        );
    }
}
