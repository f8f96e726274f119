//! The script wire protocol between kwinctl and a host, in one place. The
//! templates print these markers (the preludes, the probes) and the simulated
//! Windows host (`winsim/winsim.py`) speaks them too:
//!
//! - `KWF <key> <value>`: a Linux fact, from `KWF probe linux 2` to `KWF end`.
//! - `KWINCTL-FACTS {json}`: the Windows probe's facts, one line.
//! - `KWX <id> ok|failed <rc>` and `KWE <stderr line>`: an action's result,
//!   printed by the preludes' `kw_run` / `Invoke-KwAction`.
//! - `KWC <index> <base64>|-`: a file's content (or `-`: none), what
//!   `plan` reads to show a diff of the files it would rewrite.
//! - `# kwinctl-sim: {json}`: the header leading each block of a Windows
//!   script; the simulator acts on it. Its JSON is the action's serde form
//!   (`{"kind": …, fields…, "id": n}`), so an action type's serde shape is a
//!   cross-language API: `kind` is also the template's and the simulator
//!   handler's name.
//! - `KWL <what> <value>`: the cluster lock scripts' answers (taken,
//!   changed, held, broken, renewed, lost, released, failed; see
//!   docs/locks.md).

use crate::outcome::ActionStatus;
use crate::probe::FactsError;

/// The prefix of every line the Linux probe prints.
pub const LINUX_FACT: &str = "KWF ";
/// The prefix of the Windows probe's facts line.
pub const FACTS_MARKER: &str = "KWINCTL-FACTS ";
/// The prefix of a file-content line.
pub const FILE_CONTENT: &str = "KWC ";

/// The files' contents from `KWC` lines, by index; `None` for a file the
/// host does not have (or did not answer for).
pub fn file_contents(stdout: &str, n: usize) -> Vec<Option<Vec<u8>>> {
    use base64::Engine;
    let mut out = vec![None; n];
    for l in stdout.lines() {
        let Some((i, data)) = l.strip_prefix(FILE_CONTENT).and_then(|r| r.split_once(' ')) else {
            continue;
        };
        let Some(slot) = i.parse::<usize>().ok().and_then(|i| out.get_mut(i)) else {
            continue;
        };
        if data.trim() != "-" {
            *slot = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .ok();
        }
    }
    out
}

/// The prefix of a simulator header.
pub const SIM_HEADER: &str = "# kwinctl-sim: ";

/// The one-line machine-readable header a Windows block starts with: the
/// simulated Windows host acts on it (the PowerShell below it is for Windows).
pub fn sim_header(v: &serde_json::Value) -> String {
    format!("{SIM_HEADER}{v}\n")
}

/// Find the Windows facts line in a probe's stdout.
pub fn facts_json<'a>(stdout: &'a str, stderr: &str) -> Result<&'a str, FactsError> {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(FACTS_MARKER))
        .ok_or_else(|| FactsError::Missing {
            marker: "KWINCTL-FACTS",
            stderr: crate::text::clip(stderr.trim(), 400),
        })
}

/// Read the `KWX <id> ok|failed <rc>` and `KWE <stderr>` lines the prelude's
/// `kw_run` prints. Returns per-action results in order and the index of the
/// failed action, if any.
pub fn action_results(stdout: &str, n: usize) -> (Vec<(ActionStatus, String)>, Option<usize>) {
    let mut res: Vec<(ActionStatus, String)> = Vec::new();
    let mut failed = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("KWX ") {
            let mut it = rest.split_whitespace();
            let id: Option<usize> = it.next().and_then(|s| s.parse().ok());
            let st = it.next();
            if id != Some(res.len()) || res.len() >= n {
                continue;
            }
            match st {
                Some("ok") => res.push((ActionStatus::Changed, String::new())),
                _ => {
                    failed = Some(res.len());
                    res.push((ActionStatus::Failed, String::new()));
                }
            }
        } else if let Some(e) = line.strip_prefix("KWE ")
            && let Some(last) = res.last_mut()
            && last.0 == ActionStatus::Failed
        {
            if !last.1.is_empty() {
                last.1.push('\n');
            }
            last.1.push_str(e);
        }
    }
    (res, failed)
}

/// What a detached action's scripts printed (their `KWD` lines, see
/// `os::ops::Detached`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachState {
    /// The start script started it.
    Started,
    /// Its result is there (`KWD end` after its `KWX`/`KWE` lines).
    Done,
    /// Not yet: its task is still there.
    Pending,
    /// Neither a result nor its task: it never started.
    Missing,
    /// None of these lines.
    Unknown,
}

/// The state a detached action's script reports for `token`.
pub fn detach_state(stdout: &str, token: &str) -> DetachState {
    let mut state = DetachState::Unknown;
    for line in stdout.lines().map(str::trim_end) {
        if line == "KWD end" {
            return DetachState::Done;
        }
        let Some(rest) = line
            .strip_prefix("KWD ")
            .and_then(|r| r.strip_prefix(token))
        else {
            continue;
        };
        state = match rest {
            " started" => DetachState::Started,
            " pending" => DetachState::Pending,
            " missing" => DetachState::Missing,
            _ => state,
        };
    }
    state
}

/// What the lock script said (its lines come from the lock host: printed
/// only through `printable`).
#[derive(Debug, Default)]
pub struct LockAnswer {
    /// It broke a lock whose lease had run out.
    pub broken: Option<Broken>,
    pub what: What,
}

#[derive(Debug)]
pub struct Broken {
    /// Seconds since that lock was taken.
    pub age: String,
    /// Seconds since its lease ran out.
    pub expired: String,
    pub owner: String,
}

/// Who holds the lock.
#[derive(Debug, Default)]
pub struct Held {
    /// Seconds left of its lease.
    pub left: String,
    /// Seconds since it was taken.
    pub age: String,
    pub owner: String,
    pub run: String,
}

#[derive(Debug, Default)]
pub enum What {
    Taken,
    Changed(String),
    Held(Held),
    /// No lock (`kwinctl unlock`).
    Free,
    /// `kwinctl unlock` broke it.
    Broke,
    /// The renewal was written.
    Renewed,
    /// The lock was released.
    Released,
    /// The lock is not this run's (renewal, release).
    Lost,
    /// A write on the lock host failed (a full or read-only disk): no lock
    /// was taken, or the generation was not counted up.
    Failed(String),
    #[default]
    Nothing,
}

pub fn read_lock(stdout: &str) -> LockAnswer {
    let mut a = LockAnswer::default();
    let mut held: Option<Held> = None;
    let mut broke = false;
    let mut failed = None;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("KWL ") else {
            continue;
        };
        let (what, value) = rest.split_once(' ').unwrap_or((rest, ""));
        let value = crate::text::printable(value);
        match what {
            "taken" => a.what = What::Taken,
            "changed" => a.what = What::Changed(value),
            "failed" => failed = Some(value),
            "free" => a.what = What::Free,
            "renewed" => a.what = What::Renewed,
            "released" => a.what = What::Released,
            "lost" => a.what = What::Lost,
            "broke" => broke = true,
            "broken" => {
                let mut f = value.splitn(3, ' ');
                a.broken = Some(Broken {
                    age: f.next().unwrap_or_default().to_string(),
                    expired: f.next().unwrap_or_default().to_string(),
                    owner: f.next().unwrap_or_default().to_string(),
                });
            }
            "held" => held.get_or_insert_with(Held::default).left = value,
            "age" => held.get_or_insert_with(Held::default).age = value,
            "owner" => held.get_or_insert_with(Held::default).owner = value,
            "run" => held.get_or_insert_with(Held::default).run = value,
            _ => {}
        }
    }
    if let (What::Nothing, Some(h)) = (&a.what, held) {
        a.what = if broke { What::Broke } else { What::Held(h) };
    }
    // a failed write outweighs whatever was said before it
    if let Some(why) = failed {
        a.what = What::Failed(why);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_action_s_lines() {
        let t = "r1-0";
        assert_eq!(detach_state("KWD r1-0 started\n", t), DetachState::Started);
        assert_eq!(
            detach_state("KWD r1-0 pending\r\n", t),
            DetachState::Pending
        );
        assert_eq!(detach_state("KWD r1-0 missing\n", t), DetachState::Missing);
        assert_eq!(
            detach_state("KWX 0 ok\r\nKWD end\r\n", t),
            DetachState::Done
        );
        // another run's token, or nothing of it
        assert_eq!(detach_state("KWD r2-0 pending\n", t), DetachState::Unknown);
        assert_eq!(
            detach_state("KWX 0 failed 1\nKWE x\n", t),
            DetachState::Unknown
        );
    }

    #[test]
    fn reads_action_markers() {
        let out = "KWX 0 ok\nnoise\nKWX 1 failed 2\nKWE RTNETLINK answers: File exists\nKWE more\n";
        let (r, f) = action_results(out, 3);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0, ActionStatus::Changed);
        assert_eq!(r[1].0, ActionStatus::Failed);
        assert_eq!(r[1].1, "RTNETLINK answers: File exists\nmore");
        assert_eq!(f, Some(1));
        // out-of-order or forged ids are ignored
        let (r, f) = action_results("KWX 5 ok\nKWX 0 ok\n", 1);
        assert_eq!((r.len(), f), (1, None));
    }

    #[test]
    fn a_failed_write_outweighs_what_the_lock_script_said() {
        let a = read_lock("KWL held 3\nKWL owner x\nKWL failed cannot write\n");
        assert!(matches!(a.what, What::Failed(w) if w == "cannot write"));
        let a = read_lock("KWL taken\n");
        assert!(matches!(a.what, What::Taken));
    }

    #[test]
    fn facts_line_is_the_last_marker() {
        assert_eq!(
            facts_json("motd\nKWINCTL-FACTS {}\nKWINCTL-FACTS {\"v\":1}\n", "").unwrap(),
            "{\"v\":1}"
        );
        let e = facts_json("nothing", "boom").unwrap_err().to_string();
        assert!(e.contains("KWINCTL-FACTS") && e.contains("boom"), "{e}");
    }
}
