//! What `--output json` prints: one JSON object per line, each with
//! `"schema": 1` and an `"event"`: `start`, `phase` (with `-v`), `host`, and
//! last a `summary`, or an `error` when the command failed as a whole
//! (`unlock` prints one `unlock` event). The
//! JSON Schema of a line is generated from these types (`kwinctl schema
//! events`, published as `schema/events.schema.json`).
//!
//! One name per concept: `hosts` is always a list, `host_count` a number.
//! The schema number changes when a field is removed or changes meaning;
//! new fields may appear without a change.

use schemars::JsonSchema;
use serde::Serialize;

use crate::alloc::Assignment;
use crate::outcome::HostReport;

/// The version of the event format.
pub const SCHEMA: u32 = 1;

/// One line of `--output json`.
#[derive(Serialize, JsonSchema)]
pub struct Line<'a> {
    /// The event format's version (see the module docs).
    #[schemars(extend("const" = 1))]
    pub schema: u32,
    #[serde(flatten)]
    pub event: Event<'a>,
}

impl<'a> Line<'a> {
    pub fn new(event: Event<'a>) -> Line<'a> {
        Line {
            schema: SCHEMA,
            event,
        }
    }
    /// The line's JSON (not yet made safe: see `text::safe_json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[derive(Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event<'a> {
    /// A command that contacts hosts started.
    Start {
        command: &'a str,
        /// How many hosts it reports on.
        host_count: usize,
    },
    /// A host moved to another step (`-v` only).
    Phase { host: &'a str, phase: &'a str },
    /// A host is done (in the order hosts finish).
    Host { report: &'a HostReport },
    /// The end of a command that contacted hosts: the last line.
    #[serde(rename = "summary")]
    Summary(RunSummary<'a>),
    /// The end of `check`: the plan, contacting nothing.
    #[serde(rename = "summary")]
    CheckSummary(CheckSummary<'a>),
    /// `kwinctl unlock`: the cluster lock it found, and whether it broke
    /// it (no `holder` when no run held it).
    Unlock {
        /// The lock host.
        host: &'a str,
        broken: bool,
        /// Who held it: user@host, pid, machine and boot tags, since when.
        holder: Option<&'a str>,
        /// The run id of the lock.
        run: Option<&'a str>,
        /// Seconds since it was taken (by the lock host's clock).
        age_seconds: Option<u64>,
    },
    /// `verify --pods`: one selected node's test pod and its checks (after
    /// the hosts' own lines, before the summary).
    Pods {
        result: &'a crate::podcheck::NodePods,
    },
    /// The command failed as a whole (bad input, the lock held, kwinctl's
    /// own failure): the only line after `start`, if any.
    Error {
        command: &'a str,
        /// The exit code (2 bad input, 3 locked, 4 kwinctl's own work).
        exit: i32,
        /// What went wrong and how to fix it, as the text output says it.
        error: String,
    },
}

/// The end of a run, as the JSON output and the run record give it.
#[derive(Serialize, JsonSchema)]
pub struct RunSummary<'a> {
    pub command: &'a str,
    pub ok: bool,
    pub interrupted: bool,
    pub seconds: f64,
    /// Actions changed on all hosts.
    pub changed: usize,
    pub failed_hosts: Vec<&'a str>,
    /// Per command: where the state file is, and so on.
    pub extra: &'a serde_json::Value,
    pub hosts: &'a [HostReport],
}

/// `check`'s result.
#[derive(Serialize, JsonSchema)]
pub struct CheckSummary<'a> {
    pub command: &'a str,
    pub ok: bool,
    pub cluster: ClusterView,
    pub hosts: &'a [Assignment],
    pub notes: Vec<&'a str>,
}

#[derive(Serialize, JsonSchema)]
pub struct ClusterView {
    pub name: String,
    pub cluster_cidr: String,
    pub node_prefix: u8,
    pub service_cidr: String,
}

/// The JSON Schema of one line of `--output json`.
pub fn schema() -> String {
    let s = schemars::schema_for!(Line<'static>);
    serde_json::to_string_pretty(&s).expect("schema serializes") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_says_its_schema_and_event() {
        let l = Line::new(Event::Start {
            command: "up",
            host_count: 3,
        });
        assert_eq!(
            l.to_json(),
            r#"{"schema":1,"event":"start","command":"up","host_count":3}"#
        );
        let s: serde_json::Value = serde_json::from_str(&schema()).unwrap();
        assert_eq!(s["properties"]["schema"]["const"], SCHEMA);
    }
}
