//! `plan`: report what `up` would do. Changes nothing.

use std::collections::BTreeMap;

use super::{Ctx, step};
use crate::alloc::{Node, NodeRecord};
use crate::diff::{Conflict, Describe, Diff};
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, FileDiff, HostError, HostReport, HostStatus};
use crate::transport::Session;

/// A diff longer than this many lines is cut (the run record keeps the
/// scripts whole).
const MAX_DIFF_LINES: usize = 200;

pub(super) fn plan<A: Describe>(
    _node: &Node,
    work: Result<Diff<A>, Conflict>,
    mut r: HostReport,
) -> HostReport {
    match work {
        Err(c) => r.failed(HostError::Conflict(c)),
        Ok(d) => {
            r.notes = d.notes.clone();
            r.actions = super::step::reports_of(&d, ActionStatus::Planned);
            r.status = if d.changes() > 0 {
                HostStatus::Pending
            } else {
                HostStatus::Ok
            };
            r
        }
    }
}

/// `plan` with hosts not asked because their host key is not known yet
/// (a first `plan`, or a host just added): each is planned as the new node
/// `up --accept-new-host-keys` would most likely find, one that records
/// nothing yet, so that the cluster gets its id, the host its block (the
/// state file's, or the lowest free one: its report shows it as pending)
/// and every peer the route to it, as in `up`. Only `plan`, which writes
/// nothing: `up` never guesses what a node it cannot ask records. The notes
/// to say.
pub(super) fn as_new_nodes(
    records: &mut BTreeMap<String, NodeRecord>,
    unverified: &[String],
) -> Vec<String> {
    let mut planned = Vec::new();
    for name in unverified {
        if !records.contains_key(name) {
            records.insert(name.clone(), NodeRecord::default());
            planned.push(name.as_str());
        }
    }
    if planned.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "{}: host key not known yet, so not asked; planned as {} that records nothing yet (its \
         block shows as pending, and its own changes are not counted): compare the fingerprint, then \
         `kwinctl plan --accept-new-host-keys` plans it fully",
        planned.join(", "),
        if planned.len() == 1 {
            "a new node"
        } else {
            "new nodes"
        }
    )]
}

/// For each file `plan` would have `up` rewrite, how the host's copy differs
/// from what kwinctl would write, so that a hand edit is seen before `up`
/// overwrites it. One more read-only call, only when there is such a file.
pub(super) async fn file_diffs<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &str,
    ops: &O,
    work: &Result<Diff<O::Action>, Conflict>,
) -> Vec<FileDiff> {
    let Ok(d) = work else {
        return Vec::new();
    };
    let files: Vec<(String, String)> = d.actions().filter_map(|a| ops.rewrites(a)).collect();
    if files.is_empty() {
        return Vec::new();
    }
    let paths: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    let read = step::call(
        ctx,
        s,
        host,
        "read files to compare",
        ops.read_files(&paths),
    )
    .await;
    let now = match read {
        Ok(o) => crate::wire::file_contents(&o.stdout, files.len()),
        Err(e) => {
            return vec![FileDiff {
                path: paths.join(", "),
                diff: format!("(cannot read the host's copy: {e})"),
            }];
        }
    };
    files
        .iter()
        .zip(now)
        .map(|((path, new), old)| FileDiff {
            path: path.clone(),
            diff: match old {
                None => "(not on the host: it would be created)".into(),
                Some(old) => unified(path, &normalize(&old), &normalize(new.as_bytes())),
            },
        })
        .collect()
}

/// Text as compared: without a UTF-8 byte-order mark (Windows PowerShell
/// 5.1's `Set-Content -Encoding UTF8` writes one) and with `\n` line ends.
fn normalize(b: &[u8]) -> String {
    let b = b.strip_prefix(b"\xef\xbb\xbf").unwrap_or(b);
    String::from_utf8_lossy(b).replace("\r\n", "\n")
}

fn unified(path: &str, old: &str, new: &str) -> String {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("{path} (on the host)"),
            &format!("{path} (kwinctl)"),
        )
        .to_string();
    if text.is_empty() {
        return "(same content; only its recorded hash or mode differs)".into();
    }
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= MAX_DIFF_LINES {
        return text;
    }
    format!(
        "{}\n... {} more lines (the run record has both scripts)",
        lines[..MAX_DIFF_LINES].join("\n"),
        lines.len() - MAX_DIFF_LINES
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_edit_shows_as_a_unified_diff() {
        let d = unified("/etc/kwinctl/boot.sh", "a\nhand edit\nc\n", "a\nb\nc\n");
        assert!(d.contains("--- /etc/kwinctl/boot.sh (on the host)"), "{d}");
        assert!(d.contains("-hand edit\n+b"), "{d}");
        // a Windows copy with a BOM and CRLF is the same text
        assert_eq!(normalize(b"\xef\xbb\xbfa\r\nb\r\n"), "a\nb\n");
        let long: String = (0..500).map(|i| format!("{i}\n")).collect();
        let cut = unified("f", "", &long);
        assert!(cut.lines().count() <= MAX_DIFF_LINES + 1, "{cut}");
        assert!(
            cut.ends_with("more lines (the run record has both scripts)"),
            "{cut}"
        );
    }
}
