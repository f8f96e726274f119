//! Run records: every remote run keeps, per host, each script sent and what
//! came back (secrets redacted) in a run folder beside the state file, plus a
//! pointer to the last run so `--only-failed` can rerun just its failures.
//! Everything is written owner-only.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::outcome::{HostReport, HostStatus};
use crate::state::Sidecars;

/// How many run folders to keep.
const KEEP: usize = 20;

/// One remote call as sent and answered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Call<'a> {
    pub what: &'a str,
    pub script: &'a str,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub exit: Option<u32>,
}

impl Call<'_> {
    /// This call's section of its host's log, as [`RunRecord::append`]
    /// writes it: secrets masked, and what the host sent made safe to `cat`.
    /// Made from the call's text where it is (the script and the output are
    /// not copied to be written).
    pub fn transcript(&self) -> String {
        crate::text::safe_text_owned(call_log(self))
    }
}

/// What the last `up` (or `reset`) left to do, written when it starts (every
/// host pending) and again as each host finishes, so that a run that was
/// killed or interrupted still says which hosts did not get done.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LastRun {
    pub command: String,
    pub run_dir: PathBuf,
    pub failed: Vec<String>,
    pub interrupted: Vec<String>,
    /// Not finished (yet): the run is still going, or was killed.
    #[serde(default)]
    pub pending: Vec<String>,
    /// Finished without a failure.
    #[serde(default)]
    pub done: Vec<String>,
}

impl LastRun {
    /// The hosts `--only-failed` reruns.
    pub fn to_redo(&self) -> Vec<String> {
        self.failed
            .iter()
            .chain(&self.interrupted)
            .chain(&self.pending)
            .cloned()
            .collect()
    }
}

#[cfg(unix)]
fn private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)?;
    // owner-only, also when it was made looser before
    fs::set_permissions(p, fs::Permissions::from_mode(0o700))
}

#[cfg(unix)]
fn private_create(p: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p)?;
    // the mode applies only to a new file: tighten one left looser
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

fn private_file(p: &Path, content: &str) -> std::io::Result<()> {
    private_create(p)?.write_all(content.as_bytes())
}

/// One call's section of a host's log (not yet redacted).
fn call_log(c: &Call<'_>) -> String {
    format!(
        "##### {}\n----- script\n{}\n----- exit status: {}\n----- stdout\n{}\n----- stderr\n{}\n",
        c.what,
        c.script.trim_end(),
        c.exit
            .map(|e| e.to_string())
            .unwrap_or_else(|| "none".into()),
        c.stdout.trim_end(),
        c.stderr.trim_end()
    )
}

/// One host's protocol steps (see `transport::trace`), in `run.json`.
#[derive(Debug, Clone, Serialize)]
pub struct HostTrace {
    pub transport: String,
    /// Request/reply exchanges with the host, in all.
    pub exchanges: u32,
    pub steps: Vec<crate::transport::trace::Step>,
}

/// Who ran what, with which kwinctl and on which inventory: `run.json` in
/// the run's folder (for an audit, and to tell runs of two versions apart);
/// at the end, each host's protocol steps.
#[derive(Debug, Serialize)]
struct RunMeta {
    kwinctl: String,
    command: String,
    /// The command line, secrets masked.
    args: Vec<String>,
    /// `user@machine`, as the cluster lock names its holder.
    user: String,
    started: String,
    inventory: PathBuf,
    /// The inventory file's SHA-256, to tell which version of it ran.
    inventory_sha256: Option<String>,
    hosts: Vec<String>,
    /// By host (written when the run ends).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    traces: std::collections::BTreeMap<String, HostTrace>,
}

impl RunMeta {
    fn now(inventory: &Path, command: &str, hosts: &[String]) -> RunMeta {
        RunMeta {
            kwinctl: format!(
                "{} (git {})",
                env!("CARGO_PKG_VERSION"),
                env!("KWINCTL_GIT_COMMIT")
            ),
            command: command.to_string(),
            args: std::env::args()
                .map(|a| crate::secret::redact(&a).into_owned())
                .collect(),
            user: crate::lock::whoami(),
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            inventory: fs::canonicalize(inventory).unwrap_or_else(|_| inventory.to_path_buf()),
            inventory_sha256: fs::read(inventory)
                .ok()
                .map(|b| crate::hash::sha256_bytes(&b)),
            hosts: hosts.to_vec(),
            traces: Default::default(),
        }
    }
}

/// A run's folder, created before any host is contacted. Each remote call is
/// appended to its host's log as soon as it returns (nothing of it is held in
/// memory for the rest of the run); the summary and the last-run pointer are
/// written at the end.
#[derive(Debug)]
pub struct RunRecord {
    dir: PathBuf,
    /// `up` and `reset` keep what is left to do (see [`LastRun`]).
    last: Option<(PathBuf, std::sync::Mutex<LastRun>)>,
    /// `run.json`, written again with the hosts' traces at the end.
    meta: std::sync::Mutex<RunMeta>,
}

/// Write a small JSON file atomically (temp file + rename), owner-only.
fn replace_json<T: Serialize>(path: &Path, v: &T) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    private_file(&tmp, &serde_json::to_string_pretty(v).expect("json"))?;
    fs::rename(&tmp, path)
}

impl RunRecord {
    /// A run of `command` on `hosts` starts.
    pub fn start(inventory: &Path, command: &str, hosts: &[String]) -> std::io::Result<RunRecord> {
        let sidecars = Sidecars::of(inventory);
        private_dir(&sidecars.runs)?;
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace(':', "");
        let dir = sidecars
            .runs
            .join(format!("{stamp}-{command}-{}", std::process::id()));
        private_dir(&dir)?;
        let meta = RunMeta::now(inventory, command, hosts);
        replace_json(&dir.join("run.json"), &meta)?;
        let last = match command {
            "up" | "reset" => {
                let path = sidecars.last_run(command);
                let last = LastRun {
                    command: command.to_string(),
                    run_dir: dir.clone(),
                    pending: hosts.to_vec(),
                    ..LastRun::default()
                };
                replace_json(&path, &last)?;
                Some((path, std::sync::Mutex::new(last)))
            }
            _ => None,
        };
        Ok(RunRecord {
            dir,
            last,
            meta: std::sync::Mutex::new(meta),
        })
    }

    /// A host is done: what is left to do is written again at once.
    pub fn host_done(&self, r: &HostReport) {
        let Some((path, last)) = &self.last else {
            return;
        };
        let mut last = last.lock().unwrap();
        last.pending.retain(|h| *h != r.host);
        match r.status {
            HostStatus::Failed => last.failed.push(r.host.clone()),
            HostStatus::Interrupted => last.interrupted.push(r.host.clone()),
            _ => last.done.push(r.host.clone()),
        }
        let _ = replace_json(path, &*last);
    }

    /// A host's protocol steps, kept for `run.json` (no I/O).
    pub fn trace(&self, host: &str, transport: &str, steps: Vec<crate::transport::trace::Step>) {
        let t = HostTrace {
            transport: transport.to_string(),
            exchanges: crate::transport::trace::exchanges(&steps),
            steps,
        };
        self.meta.lock().unwrap().traces.insert(host.to_string(), t);
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Append one remote call's [`Call::transcript`] (script and output;
    /// secrets masked, and what the host sent made safe to `cat`) to the
    /// host's log (blocking file I/O).
    pub fn append(&self, host: &str, transcript: &str) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(self.dir.join(format!("{host}.log")))?;
        f.write_all(transcript.as_bytes())
    }

    /// The summary (its JSON, made safe by `report::summary_json`); old run
    /// folders are pruned.
    pub fn finish(&self, inventory: &Path, summary: &str) -> std::io::Result<()> {
        private_file(&self.dir.join("summary.json"), summary)?;
        {
            let meta = self.meta.lock().unwrap();
            if !meta.traces.is_empty() {
                replace_json(&self.dir.join("run.json"), &*meta)?;
            }
        }
        let sidecars = Sidecars::of(inventory);
        prune(&sidecars.runs);
        Ok(())
    }
}

fn prune(base: &Path) {
    let Ok(rd) = fs::read_dir(base) else { return };
    let mut dirs: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    while dirs.len() > KEEP {
        let _ = fs::remove_dir_all(dirs.remove(0));
    }
}

/// What the last run of `command` (`up` or `reset`) left to do.
pub fn load_last(inventory: &Path, command: &str) -> Result<LastRun, String> {
    let p = Sidecars::of(inventory).last_run(command);
    let text = fs::read_to_string(&p).map_err(|e| {
        format!(
            "--only-failed: there is no record of a previous `kwinctl {command}` ({}: {e}); \
             run without --only-failed",
            p.display()
        )
    })?;
    serde_json::from_str(&text)
        .map_err(|e| format!("--only-failed: {} is not valid: {e}", p.display()))
}
