//! Ansible's YAML inventory (`all: {hosts: {NAME: VARS}, vars: ..., children:
//! {GROUP: ...}}`), and the JSON `ansible-inventory --list` prints (groups
//! with lists of `hosts` and `children`, host variables under
//! `_meta.hostvars`). One reader takes both: JSON is YAML, and a group's
//! `hosts` and `children` are read as a mapping or a list.

use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::{Model, Val, Var, problem};
use crate::inventory::{Pairs, Pos, Problem};

type Vars = Pairs<Spanned<String>, Spanned<serde_json::Value>>;

#[derive(Debug, Default)]
struct Group {
    hosts: Option<Spanned<Either<Option<Vars>>>>,
    vars: Option<Spanned<Vars>>,
    children: Option<Spanned<Either<Option<Group>>>>,
    /// Only under `_meta` (`ansible-inventory --list`).
    hostvars: Pairs<Spanned<String>, Vars>,
    /// Keys given twice in this group (Ansible keeps the last).
    dups: Vec<Dup>,
}

/// A key given twice in one mapping: its name, where it was first and
/// where it was last.
#[derive(Debug, Clone)]
struct Dup {
    key: String,
    first: Pos,
    last: Pos,
}

const GROUP_KEYS: &[&str] = &["hosts", "vars", "children", "hostvars", "profile"];

/// A group's keys as Ansible's YAML loader takes them: a key given twice
/// keeps its last value (the parser hands every entry over:
/// `DuplicateKeyPolicy::PassThrough`); `profile` is ansible-core 2.19's
/// `_meta.profile` (`inventory_legacy`), not used.
impl<'de> Deserialize<'de> for Group {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Group;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a group: a mapping of hosts, vars and children")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Group, A::Error> {
                let mut g = Group::default();
                let mut seen: Vec<(String, Pos)> = Vec::new();
                while let Some(k) = m.next_key::<Spanned<String>>()? {
                    let at = pos(&k);
                    match seen.iter_mut().find(|(n, _)| *n == k.value) {
                        Some((_, first)) => {
                            g.dups.push(Dup {
                                key: k.value.clone(),
                                first: *first,
                                last: at,
                            });
                            *first = at;
                        }
                        None => seen.push((k.value.clone(), at)),
                    }
                    // a value replaced keeps its own duplicates said
                    match k.value.as_str() {
                        "hosts" => {
                            if let Some(mut old) = std::mem::replace(&mut g.hosts, m.next_value()?)
                            {
                                dedupe_hosts(&mut old.value, &mut g.dups);
                            }
                        }
                        "vars" => {
                            if let Some(mut old) = std::mem::replace(&mut g.vars, m.next_value()?) {
                                last_wins(&mut old.value.0, &mut g.dups);
                            }
                        }
                        "children" => {
                            if let Some(mut old) =
                                std::mem::replace(&mut g.children, m.next_value()?)
                            {
                                dedupe_children(&mut old.value, &mut g.dups);
                            }
                        }
                        "hostvars" => g.hostvars = m.next_value::<Option<_>>()?.unwrap_or_default(),
                        "profile" => {
                            m.next_value::<serde::de::IgnoredAny>()?;
                        }
                        other => {
                            return Err(serde::de::Error::unknown_field(other, GROUP_KEYS));
                        }
                    }
                }
                Ok(g)
            }
            fn visit_unit<E>(self) -> Result<Group, E> {
                Ok(Group::default())
            }
        }
        d.deserialize_map(V)
    }
}

/// Keep the last value of a key given twice, in the place of the first
/// (a Python dict's assignment), and say so.
fn last_wins<V>(entries: &mut Vec<(Spanned<String>, V)>, dups: &mut Vec<Dup>) {
    let mut out: Vec<(Spanned<String>, V)> = Vec::with_capacity(entries.len());
    for (k, v) in entries.drain(..) {
        match out.iter_mut().find(|(o, _)| o.value == k.value) {
            Some(slot) => {
                dups.push(Dup {
                    key: k.value.clone(),
                    first: pos(&slot.0),
                    last: pos(&k),
                });
                *slot = (k, v);
            }
            None => out.push((k, v)),
        }
    }
    *entries = out;
}

/// A mapping of names to `T`, or a list of names (`T` left out).
#[derive(Debug)]
struct Either<T>(Vec<(Spanned<String>, Option<T>)>);

impl<T> Default for Either<T> {
    fn default() -> Self {
        Either(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Either<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Either<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping or a list of names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some((k, t)) = m.next_entry::<Spanned<String>, T>()? {
                    v.push((k, Some(t)));
                }
                Ok(Either(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = s.next_element::<Spanned<String>>()? {
                    v.push((k, None));
                }
                Ok(Either(v))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Either(Vec::new()))
            }
            // yaml.py: a string stands for a mapping of that one name to
            // nothing (its position is the section's: `located`)
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                use serde_saphyr::Location;
                Ok(Either(vec![(
                    Spanned::new(v.to_string(), Location::UNKNOWN, Location::UNKNOWN),
                    None,
                )]))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

fn pos<T>(s: &Spanned<T>) -> Pos {
    Pos::from(s)
}

fn vars(vs: &Vars, what: &str) -> Vec<Var> {
    vs.0.iter()
        .map(|(k, v)| Var {
            key: k.value.clone(),
            value: Val::of_json(&v.value),
            pos: pos(k),
            what: what.to_string(),
            file: 0,
        })
        .collect()
}

/// A name's position, or its section's where a string stood for it.
fn located<T>(name: &Spanned<String>, section: &Spanned<T>) -> Pos {
    match pos(name) {
        Pos { line: 0, .. } => pos(section),
        p => p,
    }
}

/// A group's sections in file order, as yaml.py walks them (a host's
/// variables set twice keep the later).
fn group(m: &mut Model, name: &Spanned<String>, g: &Group) -> Vec<Problem> {
    let line = pos(name).line;
    m.group(&name.value, line);
    let mut problems = Vec::new();
    let mut sections: Vec<(usize, usize, u8)> = Vec::new();
    if let Some(v) = &g.vars {
        sections.push((pos(v).line, pos(v).column, 0));
    }
    if let Some(h) = &g.hosts {
        sections.push((pos(h).line, pos(h).column, 1));
    }
    if let Some(c) = &g.children {
        sections.push((pos(c).line, pos(c).column, 2));
    }
    sections.sort();
    for (_, _, which) in sections {
        match which {
            0 => {
                let vs = vars(
                    &g.vars.as_ref().unwrap().value,
                    &format!("vars of group {}", name.value),
                );
                m.group(&name.value, line).vars.extend(vs);
            }
            1 => {
                let section = g.hosts.as_ref().unwrap();
                for (h, hv) in &section.value.0 {
                    let at = located(h, section);
                    let names = match super::ini::host_pattern(&h.value) {
                        Ok(n) => n,
                        Err(e) => {
                            problems.push(problem(
                                at,
                                format!("host pattern {:?}: {e}", h.value),
                                "write ranges as [01:20] or [a:f]",
                            ));
                            continue;
                        }
                    };
                    for (host, port) in names {
                        m.member(&name.value, &host, at.line);
                        let what = format!("host {host}");
                        let mut vs = Vec::new();
                        if let Some(p) = port {
                            vs.push(Var {
                                key: "ansible_port".into(),
                                value: Val::Text(p),
                                pos: at,
                                what: format!("{what} (NAME:PORT)"),
                                file: 0,
                            });
                        }
                        if let Some(Some(hv)) = hv {
                            vs.extend(vars(hv, &what));
                        }
                        m.host(&host, at.line).vars.extend(vs);
                    }
                }
            }
            _ => {
                let section = g.children.as_ref().unwrap();
                for (c, body) in &section.value.0 {
                    let at = located(c, section);
                    m.group(&c.value, at.line)
                        .parents
                        .insert(name.value.clone());
                    if let Some(Some(body)) = body {
                        problems.extend(group(m, c, body));
                    }
                }
            }
        }
    }
    problems
}

/// Every mapping of a group with its duplicate keys resolved as Ansible
/// resolves them (the last value), each duplicate collected, also those
/// inside a value that a later one replaces (Ansible's loader builds, and
/// warns about, every value before it keeps the last).
fn dedupe(g: &mut Group, dups: &mut Vec<Dup>) {
    dups.append(&mut g.dups);
    if let Some(v) = &mut g.vars {
        last_wins(&mut v.value.0, dups);
    }
    if let Some(h) = &mut g.hosts {
        dedupe_hosts(&mut h.value, dups);
    }
    if let Some(c) = &mut g.children {
        dedupe_children(&mut c.value, dups);
    }
    last_wins(&mut g.hostvars.0, dups);
    for (_, hv) in &mut g.hostvars.0 {
        last_wins(&mut hv.0, dups);
    }
}

fn dedupe_hosts(h: &mut Either<Option<Vars>>, dups: &mut Vec<Dup>) {
    for (_, hv) in &mut h.0 {
        if let Some(Some(hv)) = hv {
            last_wins(&mut hv.0, dups);
        }
    }
    last_wins(&mut h.0, dups);
}

fn dedupe_children(c: &mut Either<Option<Group>>, dups: &mut Vec<Dup>) {
    for (_, body) in &mut c.0 {
        if let Some(Some(body)) = body {
            dedupe(body, dups);
        }
    }
    last_wins(&mut c.0, dups);
}

pub(super) fn read(text: &str) -> Result<Model, Vec<Problem>> {
    let mut options = serde_saphyr::Options::default();
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    let parsed: Result<Pairs<Spanned<String>, Option<Group>>, _> =
        serde_saphyr::from_str_with_options(text, options);
    let mut top = parsed.map_err(|e| {
        let at = e
            .location()
            .map(|l| Pos {
                line: l.line() as usize,
                column: l.column() as usize,
            })
            .unwrap_or_default();
        let msg = e.to_string();
        let first = msg.lines().next().unwrap_or("invalid YAML").to_string();
        vec![problem(
            at,
            format!("not an Ansible YAML/JSON inventory: {first}"),
            "a YAML inventory has groups at the top (all: hosts:, vars:, children:); \
             JSON is what `ansible-inventory -i INV --list` prints",
        )]
    })?;
    let mut dups = Vec::new();
    for (_, g) in &mut top.0 {
        if let Some(g) = g {
            dedupe(g, &mut dups);
        }
    }
    last_wins(&mut top.0, &mut dups);
    let mut m = Model::default();
    dups.sort_by_key(|d| (d.last.line, d.last.column));
    for d in dups {
        m.warnings.push(problem(
            d.last,
            format!(
                "the key {:?} is given twice in one mapping, at lines {} and {}: Ansible takes \
                 the last (line {}) and ignores the one at line {}",
                d.key, d.first.line, d.last.line, d.last.line, d.first.line
            ),
            "remove one of them",
        ));
    }
    let mut problems = Vec::new();
    for (name, g) in &top.0 {
        let Some(g) = g else {
            m.group(&name.value, pos(name).line);
            continue;
        };
        if name.value == "_meta" {
            for (h, hv) in &g.hostvars.0 {
                let vs = vars(hv, &format!("_meta.hostvars of {}", h.value));
                m.host(&h.value, pos(h).line).vars.extend(vs);
            }
            continue;
        }
        problems.extend(group(&mut m, name, g));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // `--list` names hosts under _meta that no group lists only when they
    // are ungrouped
    let listed: Vec<String> = m
        .groups
        .iter()
        .flat_map(|g| g.hosts.iter().cloned())
        .collect();
    let loose: Vec<(String, usize)> = m
        .hosts
        .iter()
        .filter(|h| !listed.contains(&h.name))
        .map(|h| (h.name.clone(), h.lines.first().copied().unwrap_or(0)))
        .collect();
    for (h, line) in loose {
        m.member("ungrouped", &h, line);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_groups_children_and_vault() {
        let m = read(
            "\
all:
  vars:
    ansible_user: root
  hosts:
    lone:
  children:
    windows:
      vars:
        ansible_password: !vault |
          $ANSIBLE_VAULT;1.1;AES256
          6162
      hosts:
        w1: { ansible_host: 10.0.0.4 }
    prod:
      children:
        windows:
",
        )
        .unwrap();
        let w1 = m.hosts.iter().find(|h| h.name == "w1").unwrap();
        assert_eq!((w1.vars[0].pos.line, w1.vars[0].pos.column), (13, 15));
        let g = m.groups.iter().find(|g| g.name == "windows").unwrap();
        assert_eq!(g.vars[0].value, Val::Vault);
        assert!(m.groups_of("w1").contains("prod"));
        assert!(m.groups.iter().find(|g| g.name == "all").unwrap().hosts == ["lone"]);
    }

    #[test]
    fn ansible_inventory_list_json() {
        let m = read(
            r#"{
    "_meta": {
        "hostvars": {
            "h1": {"ansible_host": "10.0.0.1", "ansible_port": 22, "p": {"__ansible_vault": "x"}},
            "h9": {}
        }
    },
    "all": {"children": ["ungrouped", "web"]},
    "web": {"hosts": ["h1"], "vars": {"ansible_user": "ops"}}
}"#,
        )
        .unwrap();
        let h1 = m.hosts.iter().find(|h| h.name == "h1").unwrap();
        assert_eq!(h1.vars[1].value, Val::Text("22".into()));
        assert_eq!(h1.vars[2].value, Val::Vault);
        assert_eq!(h1.vars[0].pos.line, 4);
        assert!(m.groups_of("h1").contains("web"));
        assert!(m.groups_of("h9").contains("ungrouped"));
    }

    #[test]
    fn file_order_a_string_for_hosts_and_ranges_as_yaml_py_reads_them() {
        let m = read(
            "\
all:
  children:
    g:
      hosts: h1
      children:
        sub:
          hosts:
            h1: { ansible_port: 2 }
            198.18.0.[1:3:2]:2022:
  hosts:
    h1: { ansible_port: 1 }
",
        )
        .unwrap();
        let h1 = m.hosts.iter().find(|h| h.name == "h1").unwrap();
        let ports: Vec<&Val> = h1.vars.iter().map(|v| &v.value).collect();
        // g's children come before all's hosts in the file: 1 is set last
        assert_eq!(ports, [&Val::Text("2".into()), &Val::Text("1".into())]);
        let g = m.groups.iter().find(|g| g.name == "g").unwrap();
        assert_eq!(g.hosts, ["h1"]);
        assert_eq!(g.line, 3);
        let r: Vec<(&str, &Val)> = m
            .hosts
            .iter()
            .filter(|h| h.name.starts_with("198."))
            .map(|h| (h.name.as_str(), &h.vars[0].value))
            .collect();
        assert_eq!(
            r,
            [
                ("198.18.0.1", &Val::Text("2022".into())),
                ("198.18.0.3", &Val::Text("2022".into()))
            ]
        );
    }

    #[test]
    fn a_key_given_twice_keeps_the_last_value_in_the_first_place() {
        let m = read(
            "\
all:
  hosts:
    a: { ansible_port: 1 }
    b:
    a: { ansible_port: 2, ansible_port: 3 }
  hosts:
    c:
    a:
",
        )
        .unwrap();
        // the second `hosts:` replaces the first: b is not Ansible's
        let names: Vec<&str> = m.hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["c", "a"]);
        let a = m.hosts.iter().find(|h| h.name == "a").unwrap();
        assert!(a.vars.is_empty(), "{:?}", a.vars);
        let lines: Vec<(usize, usize)> = m
            .warnings
            .iter()
            .map(|w| (w.pos.line, w.pos.column))
            .collect();
        assert_eq!(lines, [(5, 5), (5, 27), (6, 3)], "{:?}", m.warnings);
        assert!(
            m.warnings[0]
                .message
                .contains("\"a\" is given twice in one mapping, at lines 3 and 5")
        );
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_position() {
        let e = read("all:\n  hosts:\n    a:\n  hostz: {}\n").unwrap_err();
        assert_eq!(e[0].pos.line, 4, "{e:?}");
        assert!(e[0].message.contains("hostz"), "{e:?}");
    }
}
