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

mod address;
mod ini;
mod known;
mod map;
mod pyshlex;
mod setting;
mod vars;
mod varsfiles;
mod winrm;
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
    /// Which file of `Model::files` it is in (0: the inventory).
    pub file: usize,
}

#[derive(Debug, Default)]
pub(super) struct Group {
    pub name: String,
    pub line: usize,
    pub vars: Vec<Var>,
    /// From `group_vars/` beside the inventory (they win over `vars`).
    pub file_vars: Vec<Var>,
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
    /// From `host_vars/` beside the inventory (they win over `vars`).
    pub file_vars: Vec<Var>,
}

/// An Ansible inventory, whatever its format.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub groups: Vec<Group>,
    pub hosts: Vec<AHost>,
    /// The files read: the inventory, then `group_vars/` and `host_vars/`
    /// files (`Var::file` indexes this).
    pub files: Vec<PathBuf>,
    /// What Ansible reads with a warning (a YAML key given twice), in the
    /// inventory.
    pub warnings: Vec<Problem>,
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
                    file_vars: Vec::new(),
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

    /// The host's groups in the order Ansible merges their variables:
    /// `sort_groups`, by depth, then `ansible_group_priority`, then name.
    fn merge_order(&self, host: &AHost) -> Vec<String> {
        let mut layers: Vec<(usize, i64, String)> = self
            .groups_of(&host.name)
            .into_iter()
            .map(|g| {
                let prio = self
                    .find(&g)
                    .and_then(|g| {
                        g.vars
                            .iter()
                            .chain(&g.file_vars)
                            .rfind(|v| v.key == "ansible_group_priority")
                    })
                    .and_then(|v| match &v.value {
                        Val::Text(t) => t.parse().ok(),
                        _ => None,
                    })
                    .unwrap_or(1);
                (self.depth(&g, &mut Vec::new()), prio, g)
            })
            .collect();
        layers.sort();
        layers.into_iter().map(|l| l.2).collect()
    }

    /// The variables a host ends up with, and the layer each came from, by
    /// Ansible's precedence (`VariableManager.get_vars`): the inventory's
    /// `all` vars, `group_vars/all`, the other groups' inventory vars in
    /// merge order, their `group_vars/` files in the same order, the host's
    /// inventory vars, its `host_vars/` file. Then, of the variables one
    /// connection option takes, only the one Ansible uses is kept
    /// (`resolve_aliases`).
    pub(super) fn effective(&self, host: &AHost) -> BTreeMap<String, (Var, Layer)> {
        let mut out = BTreeMap::new();
        let mut put = |vs: &[Var], l: Layer| {
            for v in vs {
                out.insert(v.key.clone(), (v.clone(), l.clone()));
            }
        };
        let order = self.merge_order(host);
        if let Some(all) = self.find("all") {
            put(&all.vars, Layer::All);
            put(&all.file_vars, Layer::All);
        }
        for g in &order {
            if let Some(x) = self.find(g) {
                put(&x.vars, Layer::Group(g.clone()));
            }
        }
        for g in &order {
            if let Some(x) = self.find(g) {
                put(&x.file_vars, Layer::Group(g.clone()));
            }
        }
        put(&host.vars, Layer::Host(host.name.clone()));
        put(&host.file_vars, Layer::Host(host.name.clone()));
        vars::resolve_aliases(&mut out);
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

/// Problems in several files: each printed as `file:line:column: message`.
#[derive(Debug)]
struct Refused(Vec<InventoryError>);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refused {}

/// Problems tagged with the file (`Model::files` index) they are in.
pub(super) type FileProblems = Vec<(usize, Problem)>;

fn refused(files: &[PathBuf], mut problems: FileProblems) -> CliError {
    problems.sort_by_key(|(f, p)| (*f, p.pos.line, p.pos.column));
    let mut out: Vec<InventoryError> = Vec::new();
    for (f, p) in problems {
        let file = files.get(f).cloned().unwrap_or_default();
        match out.last_mut() {
            Some(e) if e.file == file => e.problems.push(p),
            _ => out.push(InventoryError {
                file,
                problems: vec![p],
            }),
        }
    }
    CliError::bad_input(Refused(out))
}

/// Whether the text is JSON (`ansible-inventory --list`), YAML (a mapping at
/// the top) or INI; (json, yaml).
fn format_of(path: &Path, text: &str) -> (bool, bool) {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .unwrap_or("");
    let json = first.starts_with('{') || path.extension().is_some_and(|e| e == "json");
    let yaml = json
        || first.starts_with("---")
        || (first.ends_with(':') && !first.starts_with('['))
        || path.extension().is_some_and(|e| e == "yml" || e == "yaml");
    (json, yaml)
}

/// The command: read, map, write to `out` (stdout when `None`).
pub fn ansible(input: &Path, out: Option<&Path>, resolve: bool) -> Result<Exit, CliError> {
    let files = vec![input.to_path_buf()];
    let text = std::fs::read_to_string(input).map_err(|e| {
        refused(
            &files,
            vec![(
                0,
                problem(
                    Pos { line: 1, column: 1 },
                    format!("cannot read the Ansible inventory: {e}"),
                    "give the path of an INI or YAML inventory, or of `ansible-inventory --list` output",
                ),
            )],
        )
    })?;
    if let Some(o) = out
        && o.exists()
    {
        return Err(CliError::bad(format!(
            "{} exists: kwinctl import does not overwrite an inventory; remove it or name another file with -o",
            o.display()
        )));
    }
    let tag = |p: Vec<Problem>| p.into_iter().map(|p| (0, p)).collect::<FileProblems>();
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        return Err(refused(&files, tag(vec![vault_file()])));
    }
    let (json, yaml) = format_of(input, &text);
    let mut model = if yaml {
        yaml::read(&text)
    } else {
        ini::read(&text)
    }
    .map_err(|p| refused(&files, tag(p)))?;
    for w in &model.warnings {
        crate::report::err_line(&format!(
            "warning: {}:{}:{}: {}",
            input.display(),
            w.pos.line,
            w.pos.column,
            w.message
        ));
    }
    model.files = files;
    if model.hosts.is_empty() {
        let files = model.files.clone();
        return Err(refused(
            &files,
            tag(vec![problem(
                no_hosts_at(&text),
                "the inventory has no hosts (Ansible's would be empty)",
                "import an inventory that lists hosts",
            )]),
        ));
    }
    // `ansible-inventory --list` has merged group_vars/ and host_vars/ in
    if !json {
        let dir = input.parent().unwrap_or(Path::new("."));
        varsfiles::load(&mut model, dir).map_err(|p| refused(&model.files, p))?;
    }
    let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let plan = map::plan(&model, &base, resolve).map_err(|p| refused(&model.files, p))?;
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

/// Where to point "no hosts": the first line that is not blank or a
/// comment (1:1 for an empty file).
fn no_hosts_at(text: &str) -> Pos {
    text.lines()
        .enumerate()
        .find(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && !t.starts_with(';')
        })
        .map(|(i, l)| Pos {
            line: i + 1,
            column: l.len() - l.trim_start().len() + 1,
        })
        .unwrap_or(Pos { line: 1, column: 1 })
}

/// A whole file encrypted with Ansible Vault.
pub(super) fn vault_file() -> Problem {
    problem(
        Pos { line: 1, column: 1 },
        "an Ansible Vault-encrypted file: kwinctl cannot read it",
        "decrypt it (ansible-vault view FILE) and import a copy without secrets, or import \
         `ansible-inventory -i INV --list --vault-password-file F` output",
    )
}
