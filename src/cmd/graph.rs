//! `kwinctl graph`: the cluster as a picture (Mermaid or Graphviz dot):
//! each node with its OS, address and pod CIDR, and each route between
//! them (node A routes B's pod CIDR via B's address), coloured by the last
//! `verify` the run records keep. Offline: contacts nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::{Common, load};
use crate::alloc::Source;
use crate::error::{CliError, Exit};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// A Mermaid flowchart (renders on GitHub, GitLab, in many editors).
    Mermaid,
    /// Graphviz dot (`dot -Tsvg`).
    Dot,
}

#[derive(Args, Clone)]
pub struct GraphArgs {
    #[command(flatten)]
    pub common: Common,
    /// The picture's language.
    #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
    pub format: GraphFormat,
    /// Write the picture here instead of stdout (an existing file is
    /// replaced).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// What the last `verify` said: per host, each check's pass by name.
#[derive(Debug, Default)]
pub struct Verified {
    /// The run folder's name (its time and pid).
    pub run: Option<String>,
    checks: BTreeMap<String, Vec<(String, bool)>>,
}

impl Verified {
    /// The `verify` run folder whose summary was written last, beside the
    /// inventory (see `record`). Last by the summary's modification time,
    /// which the file system sets, not by the folder's name, which the
    /// clock of the run's own process wrote (a run made under a clock a day
    /// ahead would otherwise stay "the last" for a day).
    pub fn last(runs: &Path) -> Verified {
        let Ok(rd) = std::fs::read_dir(runs) else {
            return Verified::default();
        };
        let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("-verify-"))
            })
            .filter_map(|p| {
                let m = std::fs::metadata(p.join("summary.json")).ok()?;
                (m.is_file()).then_some((m.modified().ok()?, p))
            })
            .collect();
        dirs.sort();
        let Some((_, dir)) = dirs.pop() else {
            return Verified::default();
        };
        let Ok(text) = std::fs::read_to_string(dir.join("summary.json")) else {
            return Verified::default();
        };
        let mut v = Verified::from_summary(&text);
        v.run = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        v
    }

    /// From a run's summary JSON (`hosts[].checks[]`).
    pub fn from_summary(text: &str) -> Verified {
        let mut checks = BTreeMap::new();
        let json: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        for h in json["hosts"].as_array().into_iter().flatten() {
            let Some(name) = h["host"].as_str() else {
                continue;
            };
            let list = h["checks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| Some((c["name"].as_str()?.to_string(), c["pass"].as_bool()?)))
                .collect();
            checks.insert(name.to_ascii_lowercase(), list);
        }
        Verified { run: None, checks }
    }

    /// Whether every check of `host` passed (`None`: not verified).
    fn host(&self, host: &str) -> Option<bool> {
        let c = self.checks.get(&host.to_ascii_lowercase())?;
        Some(c.iter().all(|(_, p)| *p))
    }

    /// Whether `from`'s route to `to`'s block and its reach check of `to`
    /// passed (`None`: neither was checked).
    fn route(&self, from: &str, to: &str, to_cidr: &str) -> Option<bool> {
        let c = self.checks.get(&from.to_ascii_lowercase())?;
        let route = format!("route {to_cidr}");
        let reach = format!("reach {to} ");
        let mine: Vec<bool> = c
            .iter()
            .filter(|(n, _)| *n == route || n.starts_with(&reach))
            .map(|(_, p)| *p)
            .collect();
        (!mine.is_empty()).then(|| mine.iter().all(|p| *p))
    }
}

/// One node of the picture.
#[derive(Debug, Clone)]
pub struct GNode {
    pub name: String,
    pub os: String,
    pub address: String,
    /// `None`: not decided yet (no `up` has given it one).
    pub pod_cidr: Option<String>,
}

/// Colours: verified good, failed, not verified.
const GOOD: (&str, &str) = ("#e3f5e1", "#2e7d32");
const BAD: (&str, &str) = ("#fde2e1", "#c62828");
const UNKNOWN: (&str, &str) = ("#eeeeee", "#757575");

fn colour(pass: Option<bool>) -> (&'static str, &'static str) {
    match pass {
        Some(true) => GOOD,
        Some(false) => BAD,
        None => UNKNOWN,
    }
}

/// Only what a label may hold: the names and addresses are validated, but
/// the picture never carries a character that would end its quoting.
fn safe(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_' | ':' | ' '))
        .collect()
}

/// A node's id in the picture: letters and digits as they are, any other
/// character as `_` and its code in hex, so distinct names (`w-1`, `w.1`,
/// `w_1`) never share an id (which would draw them as one node, coloured
/// by whichever came last).
fn node_id(name: &str) -> String {
    let mut id = String::from("n_");
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c);
        } else {
            let _ = write!(id, "_{:x}_", c as u32);
        }
    }
    id
}

/// The picture.
pub fn render(nodes: &[GNode], v: &Verified, format: GraphFormat) -> String {
    let cidr = |n: &GNode| n.pod_cidr.clone().unwrap_or_else(|| "pending".into());
    let id = |n: &GNode| node_id(&n.name);
    let mut o = String::new();
    let when = v
        .run
        .as_deref()
        .map(|r| format!("colours: the last verify ({})", safe(r)))
        .unwrap_or_else(|| "colours: no verify recorded yet (grey)".into());
    match format {
        GraphFormat::Mermaid => {
            let _ = writeln!(
                o,
                "%% kwinctl graph: nodes and the routes between them; {when}"
            );
            let _ = writeln!(o, "flowchart LR");
            for n in nodes {
                let _ = writeln!(
                    o,
                    "  {}[\"<b>{}</b><br/>{} {}<br/>pods {}\"]",
                    id(n),
                    safe(&n.name),
                    safe(&n.os),
                    safe(&n.address),
                    safe(&cidr(n))
                );
            }
            let mut styles = Vec::new();
            let mut k = 0;
            for a in nodes {
                for b in nodes.iter().filter(|b| b.name != a.name) {
                    let _ = writeln!(o, "  {} -->|{}| {}", id(a), safe(&cidr(b)), id(b));
                    let pass = b
                        .pod_cidr
                        .as_deref()
                        .and_then(|c| v.route(&a.name, &b.name, c));
                    styles.push(format!(
                        "  linkStyle {k} stroke:{},stroke-width:2px",
                        colour(pass).1
                    ));
                    k += 1;
                }
            }
            for s in styles {
                let _ = writeln!(o, "{s}");
            }
            for (class, (fill, stroke)) in [("ok", GOOD), ("failed", BAD), ("unknown", UNKNOWN)] {
                let _ = writeln!(
                    o,
                    "  classDef {class} fill:{fill},stroke:{stroke},stroke-width:2px"
                );
            }
            for n in nodes {
                let class = match v.host(&n.name) {
                    Some(true) => "ok",
                    Some(false) => "failed",
                    None => "unknown",
                };
                let _ = writeln!(o, "  class {} {class}", id(n));
            }
        }
        GraphFormat::Dot => {
            let _ = writeln!(
                o,
                "// kwinctl graph: nodes and the routes between them; {when}"
            );
            let _ = writeln!(o, "digraph kwinctl {{");
            let _ = writeln!(o, "  rankdir=LR;");
            let _ = writeln!(
                o,
                "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];"
            );
            let _ = writeln!(o, "  edge [fontname=\"Helvetica\", fontsize=9];");
            for n in nodes {
                let (fill, stroke) = colour(v.host(&n.name));
                let _ = writeln!(
                    o,
                    "  \"{}\" [label=\"{}\\n{} {}\\npods {}\", fillcolor=\"{fill}\", color=\"{stroke}\", penwidth=2];",
                    id(n),
                    safe(&n.name),
                    safe(&n.os),
                    safe(&n.address),
                    safe(&cidr(n))
                );
            }
            for a in nodes {
                for b in nodes.iter().filter(|b| b.name != a.name) {
                    let pass = b
                        .pod_cidr
                        .as_deref()
                        .and_then(|c| v.route(&a.name, &b.name, c));
                    let _ = writeln!(
                        o,
                        "  \"{}\" -> \"{}\" [label=\"{}\", color=\"{}\", fontcolor=\"{}\"];",
                        id(a),
                        id(b),
                        safe(&cidr(b)),
                        colour(pass).1,
                        colour(pass).1
                    );
                }
            }
            let _ = writeln!(o, "}}");
        }
    }
    o
}

pub fn graph(g: &GraphArgs) -> Result<Exit, CliError> {
    let l = load(&g.common)?;
    let chosen: Vec<String> = super::selected(&l, &g.common.limit)?
        .into_iter()
        .map(|(h, _)| h.name.to_ascii_lowercase())
        .collect();
    let nodes: Vec<GNode> = l
        .inv
        .hosts
        .iter()
        .zip(&l.alloc.assignments)
        .filter(|(h, _)| chosen.contains(&h.name.to_ascii_lowercase()))
        .map(|(h, a)| GNode {
            name: h.name.clone(),
            os: h.os.to_string(),
            address: h.address.to_string(),
            pod_cidr: (a.source != Source::New).then(|| a.pod_cidr.to_string()),
        })
        .collect();
    let v = Verified::last(&l.sidecars.runs);
    let text = render(&nodes, &v, g.format);
    match &g.out {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| CliError::bad(format!("cannot write {}: {e}", p.display())))?,
        None => super::emit(text.as_bytes())?,
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<GNode> {
        vec![
            GNode {
                name: "cp1".into(),
                os: "linux".into(),
                address: "10.0.0.10".into(),
                pod_cidr: Some("10.244.0.0/24".into()),
            },
            GNode {
                name: "win1".into(),
                os: "windows".into(),
                address: "10.0.0.30".into(),
                pod_cidr: Some("10.244.1.0/24".into()),
            },
            GNode {
                name: "win2".into(),
                os: "windows".into(),
                address: "10.0.0.31".into(),
                pod_cidr: None,
            },
        ]
    }

    #[test]
    fn names_that_differ_only_in_punctuation_are_distinct_nodes() {
        let mut ns = nodes();
        for (n, name) in ns.iter_mut().zip(["w-1", "w.1", "w_1"]) {
            n.name = name.into();
        }
        let v = Verified::from_summary(
            r#"{"hosts":[{"host":"w-1","checks":[{"name":"x","pass":false}]},
                          {"host":"w.1","checks":[{"name":"x","pass":true}]}]}"#,
        );
        let m = render(&ns, &v, GraphFormat::Mermaid);
        let ids: std::collections::BTreeSet<&str> = m
            .lines()
            .filter_map(|l| l.trim().strip_prefix("class "))
            .collect();
        assert_eq!(
            ids,
            ["n_w_2d_1 failed", "n_w_2e_1 ok", "n_w_5f_1 unknown"]
                .into_iter()
                .collect(),
            "{m}"
        );
        let dot = render(&ns, &v, GraphFormat::Dot);
        for id in ["n_w_2d_1", "n_w_2e_1", "n_w_5f_1"] {
            assert_eq!(
                dot.matches(&format!("  \"{id}\" [label")).count(),
                1,
                "{dot}"
            );
        }
    }

    #[test]
    fn the_last_verify_is_the_last_written_not_the_latest_named() {
        let dir = tempfile::tempdir().unwrap();
        let run = |name: &str, host_ok: bool, age: u64| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            let f = d.join("summary.json");
            std::fs::write(
                &f,
                format!(
                    r#"{{"hosts":[{{"host":"h2","checks":[{{"name":"x","pass":{host_ok}}}]}}]}}"#
                ),
            )
            .unwrap();
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(t)
                .unwrap();
        };
        // named by a clock a day ahead, written an hour ago
        run("20991231T000000Z-verify-1", true, 3600);
        // the real last one: it failed h2
        run("20261129T010000Z-verify-2", false, 10);
        let v = Verified::last(dir.path());
        assert_eq!(v.run.as_deref(), Some("20261129T010000Z-verify-2"));
        assert_eq!(v.host("h2"), Some(false));
    }

    #[test]
    fn routes_are_coloured_by_the_last_verify() {
        let v = Verified::from_summary(
            r#"{"hosts":[
              {"host":"cp1","checks":[{"name":"route 10.244.1.0/24","pass":true},{"name":"reach win1 10.0.0.30","pass":true}]},
              {"host":"win1","checks":[{"name":"route 10.244.0.0/24","pass":false},{"name":"reach cp1 10.0.0.10","pass":false}]}
            ]}"#,
        );
        let dot = render(&nodes(), &v, GraphFormat::Dot);
        assert!(
            dot.contains(&format!(
                "\"n_cp1\" -> \"n_win1\" [label=\"10.244.1.0/24\", color=\"{}\"",
                GOOD.1
            )),
            "{dot}"
        );
        assert!(
            dot.contains(&format!(
                "\"n_win1\" -> \"n_cp1\" [label=\"10.244.0.0/24\", color=\"{}\"",
                BAD.1
            )),
            "{dot}"
        );
        // not decided: pending, and grey
        assert!(dot.contains("pods pending"), "{dot}");
        assert!(
            dot.contains(&format!(
                "\"n_cp1\" -> \"n_win2\" [label=\"pending\", color=\"{}\"",
                UNKNOWN.1
            )),
            "{dot}"
        );
        let m = render(&nodes(), &v, GraphFormat::Mermaid);
        assert!(m.starts_with("%% kwinctl graph"), "{m}");
        assert!(m.contains("n_cp1 -->|10.244.1.0/24| n_win1"), "{m}");
        assert!(m.contains(&format!("linkStyle 0 stroke:{}", GOOD.1)), "{m}");
        assert!(
            m.contains("class n_win1 failed") && m.contains("class n_cp1 ok"),
            "{m}"
        );
        assert!(m.contains("class n_win2 unknown"), "{m}");
    }
}
