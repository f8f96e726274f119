//! What the operator sees: progress while hosts run, per-host results, a
//! summary table (text) or JSON lines (`--output json`, the last line a
//! summary).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::events::{Event, Line, RunSummary};
use crate::mode::Mode;
use crate::outcome::{ActionReport, ActionStatus, HostReport, HostStatus};
use crate::term::{Color, Column, Grid, Style};
use crate::text::{clip, safe_json, safe_text};
use crate::verify::Check;

/// A line on stderr, made safe (secrets masked, nothing a host sent can act
/// on the terminal: see `text::safe_text`). A closed stderr (`kwinctl up
/// 2>&1 | head -1`) is not an error worth stopping for: the hosts' work
/// matters more than our commentary on it.
pub fn err_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", safe_text(line));
}

/// Write a command's whole output (`check`, `render`, `import`) to stdout:
/// Err when it did not all arrive (a full disk, a reader that went away),
/// so the command does not exit 0 over output that was lost (see
/// `crate::stdout`).
pub fn emit(bytes: &[u8]) -> std::io::Result<()> {
    crate::stdout::write_all(bytes)
}

/// The summary as its one line of JSON, made safe (see `text::safe_json`):
/// what `--output json` ends with and what the run record keeps.
pub fn summary_json(summary: RunSummary) -> String {
    safe_json(&Line::new(Event::Summary(summary)).to_json())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
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
    /// Each failure's words, by the first host that failed so: a host
    /// failing the same way says so instead of repeating them.
    errors: Mutex<std::collections::BTreeMap<String, String>>,
    total: usize,
    start: Instant,
}

impl Reporter {
    pub fn new(format: Format, mode: Mode, total: usize, verbose: bool) -> Reporter {
        Reporter::with_events(
            format,
            mode,
            total,
            verbose,
            Box::new(crate::stdout::Stdout),
        )
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
            errors: Mutex::new(Default::default()),
            total,
            start: Instant::now(),
        };
        r.json(Event::Start {
            command: mode.name(),
            host_count: total,
        });
        r
    }

    fn json(&self, event: Event) {
        if self.format == Format::Json {
            // the line and its newline in one write: stdout is flushed
            // after each, and a reader gets whole lines
            let mut text = safe_json(&Line::new(event).to_json());
            text.push('\n');
            let mut out = self.events.lock().unwrap();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }

    /// A line for the operator on stderr, above the progress bar if any.
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(safe_text(line)),
            None => err_line(line),
        }
    }

    pub fn phase(&self, host: &str, phase: &str) {
        if let Some(b) = &self.bar {
            b.set_message(safe_text(&format!("{host}: {phase}")));
        } else if self.verbose && self.format == Format::Text {
            err_line(&format!("{host}: {phase}"));
        }
        if self.verbose {
            self.json(Event::Phase { host, phase });
        }
    }

    /// With `-v` (text): a host's protocol steps, one line each, and the
    /// request/reply exchanges they add up to.
    pub fn trace(&self, host: &str, transport: &str, steps: &[crate::transport::trace::Step]) {
        if self.verbose && self.format == Format::Text {
            for l in crate::transport::trace::lines(host, transport, steps) {
                self.say(&l);
            }
        }
    }

    pub fn host_done(&self, r: &HostReport, selected: bool) {
        self.json(Event::Host { report: r });
        let status = match &r.error {
            Some(e) => {
                let words = e.to_string();
                let mut seen = self.errors.lock().unwrap();
                match seen.get(&words) {
                    Some(first) => format!("FAILED: the same as {first}"),
                    None => {
                        seen.insert(words, r.host.clone());
                        one_line_status(self.mode, r)
                    }
                }
            }
            None => one_line_status(self.mode, r),
        };
        // a host outside --limit (a peer that got routes, or had something
        // to say) is not one of the `total` counted
        let line = if selected {
            let n = {
                let mut d = self.done.lock().unwrap();
                *d += 1;
                *d
            };
            format!("[{n}/{}] {}: {status}", self.total, r.host)
        } else {
            format!("[outside --limit] {}: {status}", r.host)
        };
        match &self.bar {
            Some(b) => {
                if selected {
                    b.inc(1);
                }
                if r.status == HostStatus::Failed {
                    b.println(safe_text(&line));
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
    ) -> RunSummary<'a> {
        let ok = reports
            .iter()
            .all(|r| !matches!(r.status, HostStatus::Failed | HostStatus::Interrupted))
            && !interrupted;
        RunSummary {
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
    /// `summary`: its JSON, as [`summary_json`] made it.
    pub fn finish(&self, reports: &[HostReport], interrupted: bool, summary: &str) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.format == Format::Json {
            let mut events = self.events.lock().unwrap();
            let _ = writeln!(events, "{summary}");
            let _ = events.flush();
            return;
        }
        let style = Style::stdout();
        let shared = Shared::of(reports);
        let mut details = String::new();
        for r in reports {
            details.push_str(&host_details(self.mode, r, &shared));
        }
        details.push_str(&shared.text());
        let mut text = paint_tags(&safe_text(&details), style);
        // the table is kwinctl's own text (made safe cell by cell), coloured
        text.push_str(&summary_table(self.mode, reports, style));
        text.push('\n');
        let failed: Vec<&str> = reports
            .iter()
            .filter(|r| r.status == HostStatus::Failed)
            .map(|r| r.host.as_str())
            .collect();
        let mut tail = format!(
            "{}, {}, {} failed in {:.1}s",
            plural(reports.len(), "host"),
            changes_line(self.mode, reports),
            failed.len(),
            self.start.elapsed().as_secs_f64()
        );
        if !failed.is_empty() {
            tail.push_str(&format!(" — failed: {}", failed.join(", ")));
        }
        if interrupted {
            tail.push_str(&interrupted_line(reports));
        }
        text.push_str(&safe_text(&tail));
        let _ = writeln!(crate::stdout::Stdout, "{text}");
    }
}

mod interrupted;
mod pods;
mod shared;
use interrupted::interrupted_line;
use shared::{Shared, error_line};

/// `1 host`, `2 hosts`.
pub fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// How many changes the run made, or (`plan`) would make, and on how many
/// hosts.
fn changes_line(mode: Mode, reports: &[HostReport]) -> String {
    let status = if mode.previews() {
        ActionStatus::Planned
    } else {
        ActionStatus::Changed
    };
    let n: usize = reports.iter().map(|r| r.count(status)).sum();
    let on = reports.iter().filter(|r| r.count(status) > 0).count();
    let on = if n > 0 {
        format!(" on {}", plural(on, "host"))
    } else {
        String::new()
    };
    if mode.previews() {
        format!("would change {n}{on}")
    } else {
        format!("{n} changed{on}")
    }
}

/// A report's block, or `pending` while it is not decided.
fn pod_cidr_text(r: &HostReport) -> String {
    if r.pod_cidr_pending {
        "pending".into()
    } else {
        r.pod_cidr.to_string()
    }
}

/// The status words kwinctl put at the start of detail lines, coloured on
/// a terminal (after the text was made safe: a host's output is indented
/// under `      | ` and never starts a line with them).
fn paint_tags(text: &str, style: Style) -> String {
    if !style.color {
        return text.to_string();
    }
    const TAGS: [(&str, Color); 5] = [
        ("  FAILED ", Color::Red),
        ("  ERROR: ", Color::Red),
        ("  FAIL ", Color::Red),
        ("  changed ", Color::Yellow),
        ("  skipped ", Color::Magenta),
    ];
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        match TAGS.iter().find(|(t, _)| line.starts_with(t)) {
            Some((t, c)) => {
                let word = t.trim();
                out.push_str("  ");
                out.push_str(&style.paint(word, *c));
                out.push(' ');
                out.push_str(&line[t.len()..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

fn one_line_status(mode: Mode, r: &HostReport) -> String {
    if let Some(e) = &r.error {
        return format!("FAILED: {}", clip(&e.to_string(), 300));
    }
    let failed_checks = r.failed_checks().count();
    match mode {
        Mode::Plan | Mode::PlanReset => format!("{} to do", r.count(ActionStatus::Planned)),
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

fn host_details(mode: Mode, r: &HostReport, shared: &Shared) -> String {
    let mut s = String::new();
    let interesting: Vec<&ActionReport> = r
        .actions
        .iter()
        .filter(|a| a.status != ActionStatus::Ok)
        .collect();
    let failed_checks: Vec<&Check> = r.failed_checks().collect();
    if mode.previews() {
        s.push_str(&format!(
            "{} ({}, {}):\n",
            r.host,
            r.address,
            pod_cidr_text(r)
        ));
        if let Some(route) = &r.route {
            s.push_str(&format!("  connection: {route}\n"));
        }
        if let Some(e) = &r.error {
            s.push_str(&error_line(e, shared));
        } else if interesting.is_empty() {
            s.push_str("  nothing to do\n");
        }
        for a in interesting {
            s.push_str(&format!("  would {}\n", a.action));
        }
        for f in &r.files {
            s.push_str(&format!("  {}:\n", f.path));
            for l in f.diff.lines() {
                s.push_str(&format!("      {l}\n"));
            }
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
            s.push_str(&error_line(e, shared));
        }
        for c in failed_checks {
            s.push_str(&format!("  FAIL {}: {}\n", c.name, c.detail));
        }
    }
    for n in r.notes.iter().filter(|n| !shared.note(n)) {
        s.push_str(&format!("  note: {n}\n"));
    }
    s
}

/// The status word's colour on a terminal.
fn status_color(s: HostStatus) -> Option<Color> {
    match s {
        HostStatus::Ok => Some(Color::Green),
        HostStatus::Changed => Some(Color::Yellow),
        HostStatus::Failed => Some(Color::Red),
        HostStatus::Interrupted => Some(Color::Magenta),
        HostStatus::Pending => None,
    }
}

/// The summary table, laid out for `style` (see [`Grid`]); `plan` counts
/// what it would change (TO DO), the others what they changed.
pub fn summary_table(mode: Mode, reports: &[HostReport], style: Style) -> String {
    let (changes, status) = if mode.previews() {
        (Column::new("TO DO"), ActionStatus::Planned)
    } else {
        (Column::new("CHANGED").short("CHG"), ActionStatus::Changed)
    };
    let mut g = Grid::new(&[
        Column::new("HOST"),
        Column::new("OS").optional(),
        Column::new("ADDRESS"),
        Column::new("POD CIDR"),
        Column::new("STATUS"),
        changes,
        Column::new("UNCHANGED").optional(),
        Column::new("FAILED").short("FAIL"),
        Column::new("CHECKS"),
        Column::new("TIME").optional(),
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
        let plain = |s: String| (s, None);
        g.row(vec![
            plain(safe_text(&r.host)),
            plain(r.os.to_string()),
            plain(r.address.to_string()),
            plain(pod_cidr_text(r)),
            (r.status.to_string(), status_color(r.status)),
            plain(r.count(status).to_string()),
            plain(r.count(ActionStatus::Ok).to_string()),
            plain(r.count(ActionStatus::Failed).to_string()),
            plain(checks),
            plain(format!("{:.1}s", r.seconds)),
        ]);
    }
    g.render(style)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Os;

    pub(super) fn reports() -> Vec<HostReport> {
        let mut v = Vec::new();
        for (i, st) in [
            HostStatus::Ok,
            HostStatus::Changed,
            HostStatus::Failed,
            HostStatus::Interrupted,
        ]
        .into_iter()
        .enumerate()
        {
            let mut r = HostReport::new(
                &format!("worker-{i:02}"),
                if i % 2 == 0 { Os::Linux } else { Os::Windows },
                format!("198.18.100.{}", 100 + i).parse().unwrap(),
                format!("198.19.{}.0/24", 200 + i).parse().unwrap(),
            );
            r.status = st;
            r.seconds = 12.3;
            v.push(r);
        }
        v
    }

    /// Each JSON event reaches stdout as one write of one whole line.
    #[test]
    fn each_event_is_one_write_of_a_whole_line() {
        #[derive(Clone, Default)]
        struct Writes(std::sync::Arc<Mutex<Vec<Vec<u8>>>>);
        impl Write for Writes {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().push(buf.to_vec());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let w = Writes::default();
        let r = Reporter::with_events(Format::Json, Mode::Verify, 4, false, Box::new(w.clone()));
        for h in reports() {
            r.host_done(&h, true);
        }
        let writes = w.0.lock().unwrap();
        let mut hosts = Vec::new();
        for line in writes.iter() {
            let text = std::str::from_utf8(line).unwrap();
            assert_eq!(text.matches('\n').count(), 1, "{text}");
            assert!(text.ends_with('\n'), "{text}");
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            if v["event"] == "host" {
                hosts.push(text.to_string());
            }
        }
        assert_eq!(hosts.len(), 4, "one write per host: {writes:?}");
        for (i, text) in hosts.iter().enumerate() {
            assert!(text.contains(&format!("worker-{i:02}")), "{text}");
        }
    }

    /// On an 80-column terminal every line fits and each host's line still
    /// names it, its address, block and status; a pipe gets every column.
    #[test]
    fn the_summary_fits_80_columns_and_keeps_what_matters() {
        let rs = reports();
        for width in [80u16, 60] {
            let t = summary_table(
                Mode::Up,
                &rs,
                Style {
                    color: false,
                    width: Some(width),
                },
            );
            for l in t.lines() {
                assert!(l.chars().count() <= width as usize, "{width}: {l:?}\n{t}");
            }
            if width == 80 {
                for r in &rs {
                    let line = t.lines().find(|l| l.contains(&r.host)).expect(&t);
                    for want in [
                        r.address.to_string(),
                        r.pod_cidr.to_string(),
                        r.status.to_string(),
                    ] {
                        assert!(line.contains(&want), "{want} in {line:?}\n{t}");
                    }
                }
            }
        }
        let wide = summary_table(Mode::Up, &rs, Style::plain());
        for h in ["OS", "UNCHANGED", "TIME", "windows", "12.3s"] {
            assert!(wide.contains(h), "{h}\n{wide}");
        }
    }

    /// `plan` counts what it would change, and a block not yet decided
    /// shows as pending (not as the start of the cluster CIDR).
    #[test]
    fn plan_counts_what_it_would_change_and_undecided_blocks_are_pending() {
        let mut rs = reports();
        for (r, n) in rs.iter_mut().zip([3, 0, 2, 0]) {
            for k in 0..n {
                r.actions.push(ActionReport {
                    key: format!("a{k}"),
                    action: format!("add route {k}"),
                    status: ActionStatus::Planned,
                    stderr: String::new(),
                });
            }
        }
        rs[3].pod_cidr_pending = true;
        assert_eq!(changes_line(Mode::Plan, &rs), "would change 5 on 2 hosts");
        assert_eq!(changes_line(Mode::Up, &rs), "0 changed");
        rs[1].actions.push(ActionReport {
            key: "x".into(),
            action: "x".into(),
            status: ActionStatus::Changed,
            stderr: String::new(),
        });
        assert_eq!(changes_line(Mode::Up, &rs), "1 changed on 1 host");
        let t = summary_table(Mode::Plan, &rs, Style::plain());
        assert!(t.contains("TO DO"), "{t}");
        let line = |h: &str| t.lines().find(|l| l.contains(h)).unwrap().to_string();
        assert!(line("worker-00").contains(" 3 "), "{t}");
        assert!(line("worker-03").contains("pending"), "{t}");
        assert!(!line("worker-03").contains("198.19.203.0/24"), "{t}");
        assert!(
            host_details(Mode::Plan, &rs[3], &Shared::default())
                .starts_with("worker-03 (198.18.100.103, pending):")
        );
    }

    /// A note or an error several hosts share is printed once, naming
    /// them; what one host has stays with it.
    #[test]
    fn shared_notes_and_errors_are_printed_once_with_their_hosts() {
        let mut rs = reports();
        for r in &mut rs {
            r.notes.push("one identity for every node".into());
        }
        rs[0].notes.push("only mine".into());
        let lock = crate::outcome::HostError::Refused("the cluster lock is held by x".into());
        rs[2].error = Some(lock.clone());
        rs[3].error = Some(lock);
        let shared = Shared::of(&rs);
        let mut all = String::new();
        for r in &rs {
            all.push_str(&host_details(Mode::Plan, r, &shared));
        }
        all.push_str(&shared.text());
        assert_eq!(
            all.matches("one identity for every node").count(),
            1,
            "{all}"
        );
        assert!(
            all.contains("worker-00, worker-01, worker-02, worker-03:\n  note: one identity"),
            "{all}"
        );
        assert_eq!(
            all.matches("the cluster lock is held by x").count(),
            1,
            "{all}"
        );
        assert!(all.contains("worker-02, worker-03:\n  ERROR: "), "{all}");
        assert!(all.contains("  note: only mine"), "{all}");
    }

    #[test]
    fn status_words_are_coloured_only_when_asked() {
        let rs = reports();
        let coloured = summary_table(
            Mode::Up,
            &rs,
            Style {
                color: true,
                width: None,
            },
        );
        assert!(coloured.contains("\x1b[38;5;1m failed"), "{coloured:?}");
        assert!(!summary_table(Mode::Up, &rs, Style::plain()).contains('\x1b'));
        let details = "h (1.2.3.4):\n  FAILED add route\n      |   FAILED from the host\n";
        let on = Style {
            color: true,
            width: None,
        };
        let painted = paint_tags(details, on);
        assert!(
            painted.contains("  \x1b[31mFAILED\x1b[0m add route"),
            "{painted:?}"
        );
        // a host's own output is never painted
        assert!(
            painted.contains("      |   FAILED from the host"),
            "{painted:?}"
        );
        assert_eq!(paint_tags(details, Style::plain()), details);
    }
}
