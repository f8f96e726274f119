//! Notes and errors several hosts share, printed once with the hosts they
//! concern (the identity note of every Windows node, a lock held for all).

use crate::outcome::HostReport;

/// Notes and errors that more than one host has: printed once, after the
/// hosts' details, with the hosts they concern.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) notes: Vec<(String, Vec<String>)>,
    pub(super) errors: Vec<(String, Vec<String>)>,
}

impl Shared {
    pub(super) fn of(reports: &[HostReport]) -> Shared {
        fn group(items: impl Iterator<Item = (String, String)>) -> Vec<(String, Vec<String>)> {
            let mut by: Vec<(String, Vec<String>)> = Vec::new();
            for (text, host) in items {
                match by.iter_mut().find(|(t, _)| *t == text) {
                    Some((_, hosts)) => hosts.push(host),
                    None => by.push((text, vec![host])),
                }
            }
            by.retain(|(_, hosts)| hosts.len() > 1);
            by
        }
        Shared {
            notes: group(
                reports
                    .iter()
                    .flat_map(|r| r.notes.iter().map(|n| (n.clone(), r.host.clone()))),
            ),
            errors: group(
                reports
                    .iter()
                    .filter_map(|r| r.error.as_ref().map(|e| (e.to_string(), r.host.clone()))),
            ),
        }
    }
    pub(super) fn note(&self, n: &str) -> bool {
        self.notes.iter().any(|(t, _)| t == n)
    }
    pub(super) fn error(&self, e: &str) -> bool {
        self.errors.iter().any(|(t, _)| t == e)
    }
    pub(super) fn text(&self) -> String {
        let mut s = String::new();
        for (e, hosts) in &self.errors {
            s.push_str(&format!("{}:\n  ERROR: {e}\n", hosts.join(", ")));
        }
        for (n, hosts) in &self.notes {
            s.push_str(&format!("{}:\n  note: {n}\n", hosts.join(", ")));
        }
        s
    }
}

/// A host's error line: the words, or a pointer to the shared ones below.
pub(super) fn error_line(e: &crate::outcome::HostError, shared: &Shared) -> String {
    let words = e.to_string();
    if shared.error(&words) {
        "  ERROR: (shared with other hosts: below)\n".into()
    } else {
        format!("  ERROR: {words}\n")
    }
}
