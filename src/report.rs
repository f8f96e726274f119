//! What the operator sees: progress while hosts run, per-host results, a
//! summary table (text) or JSON lines (`--output json`, the last line a
//! summary).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::mode::Mode;
use crate::outcome::{ActionReport, ActionStatus, HostReport, HostStatus};
use crate::text::clip;
use crate::verify::Check;

/// A line on stderr. A closed stderr (`kwinctl up 2>&1 | head -1`) is not
/// an error worth stopping for: the hosts' work matters more than our
/// commentary on it.
pub fn err_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A table in kwinctl's style.
pub fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(header);
    t
}

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

/// Where JSON events go: stdout, or a test's buffer.
pub type Events = Box<dyn Write + Send>;

pub struct Reporter {
    format: Format,
    mode: Mode,
    events: Mutex<Events>,
    bar: Option<ProgressBar>,
    verbose: bool,
    done: Mutex<usize>,
    total: usize,
    start: Instant,
}

impl Reporter {
    pub fn new(format: Format, mode: Mode, total: usize, verbose: bool) -> Reporter {
        Reporter::with_events(format, mode, total, verbose, Box::new(std::io::stdout()))
    }

    /// A reporter whose JSON events go to `events`.
    pub fn with_events(
        format: Format,
        mode: Mode,
        total: usize,
        verbose: bool,
        events: Events,
    ) -> Reporter {
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
            mode,
            events: Mutex::new(events),
            bar,
            verbose,
            done: Mutex::new(0),
            total,
            start: Instant::now(),
        };
        r.json(&serde_json::json!({"event": "start", "command": mode.name(), "hosts": total}));
        r
    }

    fn json(&self, v: &serde_json::Value) {
        if self.format == Format::Json {
            let mut out = self.events.lock().unwrap();
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
        }
    }

    /// A line for the operator on stderr, above the progress bar if any.
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => err_line(line),
        }
    }

    pub fn phase(&self, host: &str, phase: &str) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{host}: {phase}"));
        } else if self.verbose && self.format == Format::Text {
            err_line(&format!("{host}: {phase}"));
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
            one_line_status(self.mode, r)
        );
        match &self.bar {
            Some(b) => {
                b.inc(1);
                if r.status == HostStatus::Failed {
                    b.println(line);
                }
            }
            None if self.format == Format::Text => err_line(&line),
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
            command: self.mode.name(),
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
            let mut events = self.events.lock().unwrap();
            let mut out = std::io::BufWriter::new(&mut *events);
            let _ = serde_json::to_writer(&mut out, summary);
            let _ = writeln!(out);
            let _ = out.flush();
            return;
        }
        let mut out = std::io::stdout().lock();
        for r in reports {
            let _ = write!(out, "{}", host_details(self.mode, r));
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

fn one_line_status(mode: Mode, r: &HostReport) -> String {
    if let Some(e) = &r.error {
        return format!("FAILED: {}", clip(&e.to_string(), 300));
    }
    let failed_checks = r.failed_checks().count();
    match mode {
        Mode::Plan => format!("{} to do", r.count(ActionStatus::Planned)),
        Mode::Verify if failed_checks > 0 => format!("{failed_checks} checks failed"),
        Mode::Verify => format!("{} checks passed", r.checks.len()),
        Mode::Up | Mode::Reset => {
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

fn host_details(mode: Mode, r: &HostReport) -> String {
    let mut s = String::new();
    let interesting: Vec<&ActionReport> = r
        .actions
        .iter()
        .filter(|a| a.status != ActionStatus::Ok)
        .collect();
    let failed_checks: Vec<&Check> = r.failed_checks().collect();
    if mode == Mode::Plan {
        s.push_str(&format!("{} ({}, {}):\n", r.host, r.address, r.pod_cidr));
        if let Some(route) = &r.route {
            s.push_str(&format!("  connection: {route}\n"));
        }
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
    let mut t = table([
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
            r.os.to_string(),
            r.address.to_string(),
            r.pod_cidr.to_string(),
            r.status.to_string(),
            r.count(ActionStatus::Changed).to_string(),
            r.count(ActionStatus::Ok).to_string(),
            r.count(ActionStatus::Failed).to_string(),
            checks,
            format!("{:.1}s", r.seconds),
        ]);
    }
    t
}
