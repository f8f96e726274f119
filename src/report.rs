//! What the operator sees: progress while hosts run, per-host results, a
//! summary table (text) or JSON lines (`--output json`, the last line a
//! summary).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::verify::Check;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The end of a run as the JSON output and the run record give it.
#[derive(Serialize)]
pub struct Summary<'a> {
    event: &'static str,
    command: &'a str,
    ok: bool,
    interrupted: bool,
    seconds: f64,
    changed: usize,
    failed_hosts: Vec<&'a str>,
    extra: &'a serde_json::Value,
    hosts: &'a [HostReport],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
pub struct ActionReport {
    pub key: String,
    pub action: String,
    pub status: ActionStatus,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stderr: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostStatus {
    Ok,
    Changed,
    Failed,
    /// `plan`: changes pending.
    Pending,
    /// Not started because of Ctrl-C.
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub host: String,
    pub os: String,
    pub address: String,
    pub pod_cidr: String,
    pub status: HostStatus,
    pub actions: Vec<ActionReport>,
    pub checks: Vec<Check>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub seconds: f64,
    /// The control plane's view of the nodes (kubectl), when asked.
    #[serde(skip)]
    pub k8s: K8sView,
}

/// What the control plane's kubectl said about the nodes.
#[derive(Debug, Clone, Default)]
pub enum K8sView {
    #[default]
    NotAsked,
    NoKubectl,
    KubectlFailed,
    Nodes(Vec<crate::facts::K8sNode>),
}

impl HostReport {
    pub fn count(&self, s: ActionStatus) -> usize {
        self.actions.iter().filter(|a| a.status == s).count()
    }
    pub fn failed_checks(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.pass)
    }
}

/// Shorten text for one line of output.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

pub struct Reporter {
    format: Format,
    command: &'static str,
    bar: Option<ProgressBar>,
    verbose: bool,
    done: Mutex<usize>,
    total: usize,
    start: Instant,
}

impl Reporter {
    pub fn new(format: Format, command: &'static str, total: usize, verbose: bool) -> Reporter {
        let bar = (std::io::stderr().is_terminal() && total > 0).then(|| {
            let b = ProgressBar::new(total as u64);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} hosts {wide_msg}",
                )
                .expect("progress template"),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        let r = Reporter {
            format,
            command,
            bar,
            verbose,
            done: Mutex::new(0),
            total,
            start: Instant::now(),
        };
        r.json(&serde_json::json!({"event": "start", "command": command, "hosts": total}));
        r
    }

    fn json(&self, v: &serde_json::Value) {
        if self.format == Format::Json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{v}");
        }
    }

    /// A line for the operator on stderr, above the progress bar if any.
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn phase(&self, host: &str, phase: &str) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{host}: {phase}"));
        } else if self.verbose && self.format == Format::Text {
            eprintln!("{host}: {phase}");
        }
        if self.verbose {
            self.json(&serde_json::json!({"event": "phase", "host": host, "phase": phase}));
        }
    }

    pub fn host_done(&self, r: &HostReport) {
        let n = {
            let mut d = self.done.lock().unwrap();
            *d += 1;
            *d
        };
        self.json(&serde_json::json!({"event": "host", "report": r}));
        let line = format!(
            "[{n}/{}] {}: {}",
            self.total,
            r.host,
            one_line_status(self.command, r)
        );
        match &self.bar {
            Some(b) => {
                b.inc(1);
                if r.status == HostStatus::Failed {
                    b.println(line);
                }
            }
            None if self.format == Format::Text => eprintln!("{line}"),
            None => {}
        }
    }

    /// The summary (one line of JSON; also what the run record keeps). It
    /// borrows the reports and is serialised straight to where it goes: at
    /// 200 hosts it is megabytes, and a `serde_json::Value` tree of it cost
    /// about 50 MB.
    pub fn summary<'a>(
        &'a self,
        reports: &'a [HostReport],
        interrupted: bool,
        extra: &'a serde_json::Value,
    ) -> Summary<'a> {
        let ok = reports
            .iter()
            .all(|r| !matches!(r.status, HostStatus::Failed | HostStatus::Interrupted))
            && !interrupted;
        Summary {
            event: "summary",
            command: self.command,
            ok,
            interrupted,
            seconds: self.start.elapsed().as_secs_f64(),
            changed: reports.iter().map(|r| r.count(ActionStatus::Changed)).sum(),
            failed_hosts: reports
                .iter()
                .filter(|r| r.status == HostStatus::Failed)
                .map(|r| r.host.as_str())
                .collect(),
            extra,
            hosts: reports,
        }
    }

    /// The end: details per host, then the table (text) or the summary line
    /// (JSON).
    /// In JSON mode the summary is the last line.
    pub fn finish(&self, reports: &[HostReport], interrupted: bool, summary: &Summary) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.format == Format::Json {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let _ = serde_json::to_writer(&mut out, summary);
            let _ = writeln!(out);
            return;
        }
        let mut out = std::io::stdout().lock();
        for r in reports {
            let _ = write!(out, "{}", host_details(self.command, r));
        }
        let _ = writeln!(out, "{}", summary_table(reports));
        let failed: Vec<&str> = reports
            .iter()
            .filter(|r| r.status == HostStatus::Failed)
            .map(|r| r.host.as_str())
            .collect();
        let changed: usize = reports.iter().map(|r| r.count(ActionStatus::Changed)).sum();
        let mut tail = format!(
            "{} hosts, {} changed, {} failed in {:.1}s",
            reports.len(),
            changed,
            failed.len(),
            self.start.elapsed().as_secs_f64()
        );
        if !failed.is_empty() {
            tail.push_str(&format!(" — failed: {}", failed.join(", ")));
        }
        if interrupted {
            let done: Vec<&str> = reports
                .iter()
                .filter(|r| r.status != HostStatus::Interrupted)
                .map(|r| r.host.as_str())
                .collect();
            tail.push_str(&format!(
                "\nINTERRUPTED: completed hosts: {}; the others were not started",
                if done.is_empty() {
                    "none".into()
                } else {
                    done.join(", ")
                }
            ));
        }
        let _ = writeln!(out, "{tail}");
    }
}

fn one_line_status(command: &str, r: &HostReport) -> String {
    if let Some(e) = &r.error {
        return format!("FAILED: {}", clip(e, 300));
    }
    let failed_checks = r.failed_checks().count();
    match command {
        "plan" => format!("{} to do", r.count(ActionStatus::Planned)),
        "verify" if failed_checks > 0 => format!("{failed_checks} checks failed"),
        "verify" => format!("{} checks passed", r.checks.len()),
        _ => {
            let mut s = format!(
                "{} changed, {} unchanged",
                r.count(ActionStatus::Changed),
                r.count(ActionStatus::Ok)
            );
            if r.count(ActionStatus::Failed) > 0 {
                s.push_str(", 1 failed");
            }
            if failed_checks > 0 {
                s.push_str(&format!(", {failed_checks} checks failed"));
            }
            s
        }
    }
}

fn host_details(command: &str, r: &HostReport) -> String {
    let mut s = String::new();
    let interesting: Vec<&ActionReport> = r
        .actions
        .iter()
        .filter(|a| a.status != ActionStatus::Ok)
        .collect();
    let failed_checks: Vec<&Check> = r.failed_checks().collect();
    if command == "plan" {
        s.push_str(&format!("{} ({}, {}):\n", r.host, r.address, r.pod_cidr));
        if let Some(e) = &r.error {
            s.push_str(&format!("  ERROR: {e}\n"));
        } else if interesting.is_empty() {
            s.push_str("  nothing to do\n");
        }
        for a in interesting {
            s.push_str(&format!("  would {}\n", a.action));
        }
    } else {
        if interesting.is_empty() && failed_checks.is_empty() && r.error.is_none() {
            return s;
        }
        s.push_str(&format!("{} ({}):\n", r.host, r.address));
        for a in interesting {
            let tag = match a.status {
                ActionStatus::Changed => "changed",
                ActionStatus::Failed => "FAILED ",
                ActionStatus::Skipped => "skipped",
                _ => "",
            };
            s.push_str(&format!("  {tag} {}\n", a.action));
            for l in a.stderr.lines() {
                s.push_str(&format!("      | {l}\n"));
            }
        }
        if let Some(e) = &r.error {
            s.push_str(&format!("  ERROR: {e}\n"));
        }
        for c in failed_checks {
            s.push_str(&format!("  FAIL {}: {}\n", c.name, c.detail));
        }
    }
    for n in &r.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    s
}

pub fn summary_table(reports: &[HostReport]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header([
        "HOST",
        "OS",
        "ADDRESS",
        "POD CIDR",
        "STATUS",
        "CHANGED",
        "UNCHANGED",
        "FAILED",
        "CHECKS",
        "TIME",
    ]);
    for r in reports {
        let checks = if r.checks.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{}/{}",
                r.checks.iter().filter(|c| c.pass).count(),
                r.checks.len()
            )
        };
        t.add_row([
            r.host.clone(),
            r.os.clone(),
            r.address.clone(),
            r.pod_cidr.clone(),
            format!("{:?}", r.status).to_lowercase(),
            r.count(ActionStatus::Changed).to_string(),
            r.count(ActionStatus::Ok).to_string(),
            r.count(ActionStatus::Failed).to_string(),
            checks,
            format!("{:.1}s", r.seconds),
        ]);
    }
    t
}
