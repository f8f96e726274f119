//! `kwinctl import ansible INVENTORY`: an Ansible inventory (INI, YAML, or
//! the JSON `ansible-inventory --list` prints) written as a kwinctl
//! inventory, each host, group and setting with a comment saying where it
//! came from.
//!
//! - `ini.rs`, `yaml.rs` read the formats into one model (this file), with
//!   the line of every host, group and variable;
//! - the variables a host ends up with follow Ansible's precedence (`all`,
//!   then groups from the shallowest to the deepest, equal depths by name,
//!   then the host's own: "How variables are merged" in Ansible's inventory
//!   guide);
//! - `map.rs` turns Ansible's connection variables into kwinctl's settings
//!   and refuses what it cannot map (exit 2, `file:line:column`, the
//!   variable), never dropping a connection setting silently; passwords are
//!   never copied (a `password_env` to set instead);
//! - `write.rs` writes the inventory: Ansible's `all` vars as `defaults`,
//!   its groups as `groups` (children flattened: a host lists every group it
//!   is in), and on a host whatever kwinctl's rule (a clash between two
//!   groups is an error) would otherwise resolve differently from Ansible's.
//!   The `cluster:` section, which no Ansible inventory holds, is written
//!   with `FILL-IN` placeholders that `check` refuses.

mod ini;
mod map;
mod vars;
mod write;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{CliError, Exit};
use crate::inventory::{InventoryError, Pos, Problem};

/// A variable's value as the inventory gives it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Text(String),
    /// An Ansible Vault value (`!vault |`, or `__ansible_vault` in JSON).
    Vault,
    /// A list or a mapping.
    Structured,
    Null,
}

impl Val {
    pub(super) fn of_json(v: &serde_json::Value) -> Val {
        use serde_json::Value as J;
        match v {
            J::Null => Val::Null,
            J::Bool(b) => Val::Text(b.to_string()),
            J::Number(n) => Val::Text(n.to_string()),
            // a `!vault |` scalar arrives as its text
            J::String(s) if s.trim_start().starts_with("$ANSIBLE_VAULT;") => Val::Vault,
            J::String(s) => Val::Text(s.clone()),
            J::Object(o) if o.contains_key("__ansible_vault") || o.contains_key("vault") => {
                Val::Vault
            }
            _ => Val::Structured,
        }
    }
}

/// Where a variable was set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Layer {
    All,
    Group(String),
    Host(String),
}

#[derive(Debug, Clone)]
pub(super) struct Var {
    pub key: String,
    pub value: Val,
    pub pos: Pos,
    /// What the position is in (`[web:vars]`, `host web1`), for comments.
    pub what: String,
}

#[derive(Debug, Default)]
pub(super) struct Group {
    pub name: String,
    pub line: usize,
    pub vars: Vec<Var>,
    pub parents: BTreeSet<String>,
    /// Hosts listed directly under it.
    pub hosts: Vec<String>,
}

#[derive(Debug)]
pub(super) struct AHost {
    pub name: String,
    /// Lines where the host is listed.
    pub lines: Vec<usize>,
    pub vars: Vec<Var>,
}

/// An Ansible inventory, whatever its format.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub groups: Vec<Group>,
    pub hosts: Vec<AHost>,
}

impl Model {
    pub(super) fn group(&mut self, name: &str, line: usize) -> &mut Group {
        let i = match self.groups.iter().position(|g| g.name == name) {
            Some(i) => i,
            None => {
                self.groups.push(Group {
                    name: name.to_string(),
                    line,
                    ..Group::default()
                });
                self.groups.len() - 1
            }
        };
        &mut self.groups[i]
    }

    pub(super) fn host(&mut self, name: &str, line: usize) -> &mut AHost {
        let i = match self.hosts.iter().position(|h| h.name == name) {
            Some(i) => i,
            None => {
                self.hosts.push(AHost {
                    name: name.to_string(),
                    lines: Vec::new(),
                    vars: Vec::new(),
                });
                self.hosts.len() - 1
            }
        };
        let h = &mut self.hosts[i];
        if !h.lines.contains(&line) {
            h.lines.push(line);
        }
        h
    }

    /// A host listed under a group.
    pub(super) fn member(&mut self, group: &str, host: &str, line: usize) {
        self.host(host, line);
        let g = self.group(group, line);
        if !g.hosts.iter().any(|h| h == host) {
            g.hosts.push(host.to_string());
        }
    }

    fn find(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// A group's depth below `all` (Ansible's: the longest way up).
    fn depth(&self, name: &str, seen: &mut Vec<String>) -> usize {
        if name == "all" || seen.iter().any(|s| s == name) {
            return 0;
        }
        seen.push(name.to_string());
        let d = match self.find(name) {
            Some(g) if !g.parents.is_empty() => {
                g.parents
                    .iter()
                    .map(|p| self.depth(p, seen))
                    .max()
                    .unwrap_or(0)
                    + 1
            }
            _ => 1,
        };
        seen.pop();
        d
    }

    /// Every group a host is in (`all` aside), with the groups above them.
    pub(super) fn groups_of(&self, host: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut todo: Vec<String> = self
            .groups
            .iter()
            .filter(|g| g.hosts.iter().any(|h| h == host))
            .map(|g| g.name.clone())
            .collect();
        while let Some(g) = todo.pop() {
            if g == "all" || !out.insert(g.clone()) {
                continue;
            }
            if let Some(g) = self.find(&g) {
                todo.extend(g.parents.iter().cloned());
            }
        }
        out
    }

    /// Every host in a group, through its children.
    pub(super) fn members(&self, group: &str) -> Vec<&AHost> {
        self.hosts
            .iter()
            .filter(|h| group == "all" || self.groups_of(&h.name).contains(group))
            .collect()
    }

    /// The variables a host ends up with, and the layer each came from, by
    /// Ansible's precedence.
    pub(super) fn effective(&self, host: &AHost) -> BTreeMap<String, (Var, Layer)> {
        let mut layers: Vec<(usize, i64, String)> = self
            .groups_of(&host.name)
            .into_iter()
            .map(|g| {
                let prio = self
                    .find(&g)
                    .and_then(|g| g.vars.iter().rfind(|v| v.key == "ansible_group_priority"))
                    .and_then(|v| match &v.value {
                        Val::Text(t) => t.parse().ok(),
                        _ => None,
                    })
                    .unwrap_or(1);
                (self.depth(&g, &mut Vec::new()), prio, g)
            })
            .collect();
        layers.sort();
        let mut out = BTreeMap::new();
        let all = self.find("all").map(|g| g.vars.as_slice()).unwrap_or(&[]);
        for v in all {
            out.insert(v.key.clone(), (v.clone(), Layer::All));
        }
        for (_, _, g) in layers {
            for v in self.find(&g).map(|g| g.vars.as_slice()).unwrap_or(&[]) {
                out.insert(v.key.clone(), (v.clone(), Layer::Group(g.clone())));
            }
        }
        for v in &host.vars {
            out.insert(v.key.clone(), (v.clone(), Layer::Host(host.name.clone())));
        }
        out
    }
}

/// A problem at a position of the Ansible inventory.
pub(super) fn problem(pos: Pos, message: impl Into<String>, hint: impl Into<String>) -> Problem {
    Problem {
        pos,
        message: message.into(),
        hint: hint.into(),
    }
}

/// Read an Ansible inventory: JSON (`ansible-inventory --list`) and YAML
/// by their content (a mapping at the top), INI otherwise.
fn read(path: &Path, text: &str) -> Result<Model, Vec<Problem>> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .unwrap_or("");
    let yamlish = first.starts_with('{')
        || first.starts_with("---")
        || (first.ends_with(':') && !first.starts_with('['))
        || path
            .extension()
            .is_some_and(|e| e == "yml" || e == "yaml" || e == "json");
    if yamlish {
        yaml::read(text)
    } else {
        ini::read(text)
    }
}

/// The command: read, map, write to `out` (stdout when `None`).
pub fn ansible(input: &Path, out: Option<&Path>, resolve: bool) -> Result<Exit, CliError> {
    let err = |problems: Vec<Problem>| {
        CliError::from(InventoryError {
            file: input.to_path_buf(),
            problems,
        })
    };
    let text = std::fs::read_to_string(input).map_err(|e| {
        err(vec![problem(
            Pos::default(),
            format!("cannot read the Ansible inventory: {e}"),
            "give the path of an INI or YAML inventory, or of `ansible-inventory --list` output",
        )])
    })?;
    if let Some(o) = out
        && o.exists()
    {
        return Err(CliError::bad(format!(
            "{} exists: kwinctl import does not overwrite an inventory; remove it or name another file with -o",
            o.display()
        )));
    }
    let model = read(input, &text).map_err(err)?;
    if model.hosts.is_empty() {
        return Err(err(vec![problem(
            Pos::default(),
            "the inventory has no hosts",
            "import an inventory that lists hosts",
        )]));
    }
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let plan = map::plan(&model, &base, resolve).map_err(|mut p| {
        p.sort_by_key(|p| (p.pos.line, p.pos.column));
        err(p)
    })?;
    let name = input.display().to_string();
    let yaml = write::inventory(&plan, &name);
    match out {
        Some(o) => std::fs::write(o, &yaml).map_err(|e| {
            CliError::internal(anyhow::anyhow!("cannot write {}: {e}", o.display()))
        })?,
        None => crate::report::emit(yaml.as_bytes()).map_err(|e| {
            CliError::internal(anyhow::anyhow!(
                "cannot write the inventory to stdout: {e}; the inventory did not arrive whole"
            ))
        })?,
    }
    for line in write::next_steps(&plan, out) {
        crate::report::err_line(&line);
    }
    Ok(Exit::Ok)
}
