//! `kwinctl import ansible` against Ansible itself: for every inventory of
//! tests/ansible/corpus/ (each learned from Ansible's own tests and
//! documentation or from public Kubernetes playbooks; its SOURCE file says
//! where), `ansible-inventory -i INV --list` from ansible-core (the venv
//! scripts/setup.sh makes) is the oracle. For every host the import
//! accepts, the host set, connection address, port, user, key, connection
//! (ssh, winrm or psrp, hence the OS), the WinRM scheme, port and
//! authentication and the group membership must be what Ansible would use,
//! reading each connection plugin's options as Ansible does (the last
//! variable of an option's list that is set wins: docs/research/ansible-import.md).
//! An inventory the import refuses must be refused with a file:line:column
//! and a reason for every problem. Any other outcome is a silent difference,
//! and the test fails on it unless the case is listed in
//! tests/ansible/corpus/KNOWN (which the test also keeps honest: a case
//! listed there that agrees fails the test until it is taken off). Each
//! case is imported twice: from its file, and from the JSON `--list`
//! printed for it. A case's `EXPECT` file holds it to more: `agree` (the
//! import must accept it and agree: a refusal fails), or `ansible-refuses`
//! (an inventory `ansible-inventory` itself refuses: the import must refuse
//! it too, with a position). Where Ansible warns that a YAML key is given
//! twice, the import must warn about the same key.
//! `KWINCTL_CORPUS_CASE=NAME` runs one case; run with `--nocapture` to see
//! the counts.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kwinctl::inventory::{Connection, Inventory, Os, WinRmAuth};
use serde_json::Value;

const ANSIBLE_VENV: &str = "/var/cache/kwinctl-ansible/venv";

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ansible/corpus")
}

fn ansible_inventory() -> PathBuf {
    let venv = std::env::var("KWINCTL_ANSIBLE_VENV").unwrap_or_else(|_| ANSIBLE_VENV.into());
    let bin = Path::new(&venv).join("bin/ansible-inventory");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/setup.sh (it installs ansible-core in a venv)",
        bin.display()
    );
    bin
}

/// The inventory file of a case: the one named `inventory*`.
fn inventory_of(case: &Path) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir(case)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("inventory")
        })
        .collect();
    assert_eq!(found.len(), 1, "{}: one inventory* file", case.display());
    found.pop().unwrap()
}

/// What `ansible-inventory --list` prints for a case (its JSON and its
/// stderr), or, when it fails, its output.
fn oracle(case: &Path, inv: &Path, scratch: &Path) -> Result<(Value, String), String> {
    let mut cmd = Command::new(ansible_inventory());
    cmd.arg("-i").arg(inv).arg("--list");
    let vault = case.join("vault-password");
    if vault.exists() {
        cmd.arg("--vault-password-file").arg(&vault);
    }
    cmd.current_dir(scratch)
        .env("HOME", scratch)
        .env("ANSIBLE_CONFIG", scratch.join("none.cfg"))
        .env("ANSIBLE_LOCAL_TEMP", scratch)
        .env("ANSIBLE_INVENTORY_UNPARSED_FAILED", "true")
        .env("ANSIBLE_INVENTORY_ENABLED", "ini,yaml,script")
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_FORCE_COLOR", "0");
    let o = common::run_bounded(cmd, Duration::from_secs(120));
    if !o.status.success() {
        return Err(common::text(&o));
    }
    let list = serde_json::from_slice(&o.stdout).expect("ansible-inventory JSON");
    Ok((list, String::from_utf8_lossy(&o.stderr).into_owned()))
}

/// What a case's EXPECT file asks for.
#[derive(PartialEq)]
enum Expect {
    /// Agree or be refused with a position.
    Either,
    Agree,
    AnsibleRefuses,
}

fn expect_of(case: &Path) -> Expect {
    let e = std::fs::read_to_string(case.join("EXPECT")).unwrap_or_default();
    match e.split_whitespace().next() {
        None => Expect::Either,
        Some("agree") => Expect::Agree,
        Some("ansible-refuses") => Expect::AnsibleRefuses,
        Some(o) => panic!("{}: EXPECT {o:?}: agree or ansible-refuses", case.display()),
    }
}

/// What Ansible's YAML loader warned was given twice, each as the warning
/// kwinctl must give: `FILE:LINE:COLUMN: the key "KEY" is given twice`
/// (ansible-core 2.19: "Found duplicate mapping key 'KEY'." then
/// "Origin: FILE:LINE:COLUMN", the later key's position).
fn duplicate_keys_warned(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in stderr.split("Found duplicate mapping key '").skip(1) {
        let Some((key, rest)) = part.split_once("'.") else {
            continue;
        };
        let origin = rest
            .lines()
            .find_map(|l| l.trim().strip_prefix("Origin: "))
            .unwrap_or("");
        out.push(format!("{origin}: the key {key:?} is given twice"));
    }
    out
}

/// A variable as text, as Ansible would hand it to a connection plugin.
fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.into()),
        Value::Number(n) => Some(n.to_string()),
        _ => Some(v.to_string()),
    }
}

/// An option of a connection plugin: the last of its variables that is set
/// (ansible-core's `ConfigManager._loop_entries`).
fn option(vars: &serde_json::Map<String, Value>, names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| vars.get(*n).and_then(as_text))
        .next_back()
}

/// What Ansible would do to reach a host.
#[derive(Debug, PartialEq)]
struct Reach {
    os: Os,
    /// ssh, winrm or psrp
    plugin: String,
    connect: String,
    /// kubespray's `ip`: the address the node is known by.
    ip: Option<String>,
    port: u16,
    user: Option<String>,
    key: Option<String>,
    tls: Option<bool>,
    auth: Option<WinRmAuth>,
    groups: BTreeSet<String>,
}

fn expand_home(p: &str, home: &Path, cwd: &Path) -> String {
    let p = if let Some(rest) = p.strip_prefix("~/") {
        home.join(rest)
    } else {
        cwd.join(p)
    };
    p.display().to_string()
}

/// Ansible's answer for one host; `None` for a connection kwinctl has no
/// counterpart for (then it must be refused).
fn ansible_reach(
    name: &str,
    vars: &serde_json::Map<String, Value>,
    groups: BTreeSet<String>,
    home: &Path,
    cwd: &Path,
) -> Option<Reach> {
    let conn = option(vars, &["ansible_connection"]).unwrap_or_else(|| "ssh".into());
    let plugin = match conn.as_str() {
        "ssh" | "smart" | "paramiko" | "paramiko_ssh" | "ansible.builtin.ssh" => "ssh",
        "winrm" | "ansible.builtin.winrm" => "winrm",
        "psrp" | "ansible.builtin.psrp" => "psrp",
        _ => return None,
    };
    let addr_vars: &[&str] = match plugin {
        "ssh" => &["ansible_host", "ansible_ssh_host"],
        "winrm" => &["ansible_host", "ansible_winrm_host"],
        _ => &["ansible_host", "ansible_psrp_host"],
    };
    let connect = option(vars, addr_vars).unwrap_or_else(|| name.to_string());
    let shell = option(vars, &["ansible_shell_type"]);
    let mut os = if plugin != "ssh" || matches!(shell.as_deref(), Some("powershell" | "cmd")) {
        Os::Windows
    } else {
        Os::Linux
    };
    match option(vars, &["kwinctl_os"]).as_deref() {
        Some("linux") => os = Os::Linux,
        Some("windows") => os = Os::Windows,
        _ => {}
    }
    let ip = option(vars, &["ip"]).filter(|i| i.parse::<Ipv4Addr>().is_ok());
    let port_of = |names: &[&str]| option(vars, names).and_then(|p| p.parse::<u16>().ok());
    let r = match plugin {
        "ssh" => Reach {
            os,
            plugin: plugin.into(),
            connect,
            ip,
            port: port_of(&["ansible_port", "ansible_ssh_port"]).unwrap_or(22),
            user: option(vars, &["ansible_user", "ansible_ssh_user"]),
            key: option(
                vars,
                &["ansible_private_key_file", "ansible_ssh_private_key_file"],
            )
            .map(|k| expand_home(&k, home, cwd)),
            tls: None,
            auth: None,
            groups,
        },
        "winrm" => {
            // winrm.py: port defaults to 5986; no scheme: http on 5985, else https
            let port = port_of(&["ansible_port", "ansible_winrm_port"]).unwrap_or(5986);
            let tls = match option(vars, &["ansible_winrm_scheme"]).as_deref() {
                Some("http") => false,
                Some(_) => true,
                None => port != 5985,
            };
            // no transport and no Kerberos: ssl (https) or plaintext (http), both Basic
            let auth = match option(vars, &["ansible_winrm_transport"])
                .map(|t| t.to_ascii_lowercase())
                .as_deref()
            {
                None | Some("ssl" | "plaintext" | "basic") => WinRmAuth::Basic,
                Some("ntlm") => WinRmAuth::Ntlm,
                Some(_) => WinRmAuth::Kerberos,
            };
            Reach {
                os,
                plugin: plugin.into(),
                connect,
                ip,
                port,
                user: option(vars, &["ansible_user", "ansible_winrm_user"]),
                key: None,
                tls: Some(tls),
                auth: Some(auth),
                groups,
            }
        }
        _ => {
            // psrp.py: protocol and port default from each other
            let port = port_of(&["ansible_port", "ansible_psrp_port"]);
            let proto = option(vars, &["ansible_psrp_protocol"]);
            let (tls, port) = match (proto.as_deref(), port) {
                (None, None) => (true, 5986),
                (None, Some(p)) => (p != 5985, p),
                (Some(pr), p) => {
                    let tls = pr == "https";
                    (tls, p.unwrap_or(if tls { 5986 } else { 5985 }))
                }
            };
            let auth = match option(vars, &["ansible_psrp_auth"])
                .unwrap_or_else(|| "negotiate".into())
                .to_ascii_lowercase()
                .as_str()
            {
                "basic" => WinRmAuth::Basic,
                "ntlm" | "negotiate" => WinRmAuth::Ntlm,
                _ => WinRmAuth::Kerberos,
            };
            Reach {
                os,
                plugin: plugin.into(),
                connect,
                ip,
                port,
                user: option(vars, &["ansible_user", "ansible_psrp_user"]),
                key: None,
                tls: Some(tls),
                auth: Some(auth),
                groups,
            }
        }
    };
    Some(r)
}

/// Every host of `--list` with its variables and groups (`all` and
/// `ungrouped` aside).
fn ansible_hosts(
    list: &Value,
) -> BTreeMap<String, (serde_json::Map<String, Value>, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (serde_json::Map<String, Value>, BTreeSet<String>)> =
        BTreeMap::new();
    let hostvars = list["_meta"]["hostvars"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (h, v) in &hostvars {
        out.insert(
            h.clone(),
            (v.as_object().cloned().unwrap_or_default(), BTreeSet::new()),
        );
    }
    fn walk(
        list: &Value,
        group: &str,
        above: &mut Vec<String>,
        out: &mut BTreeMap<String, (serde_json::Map<String, Value>, BTreeSet<String>)>,
    ) {
        if above.iter().any(|g| g == group) {
            return;
        }
        above.push(group.to_string());
        let g = &list[group];
        for h in g["hosts"].as_array().into_iter().flatten() {
            let h = h.as_str().unwrap().to_string();
            let e = out.entry(h).or_default();
            for a in above.iter() {
                if a != "all" && a != "ungrouped" {
                    e.1.insert(a.clone());
                }
            }
        }
        for c in g["children"].as_array().into_iter().flatten() {
            walk(list, c.as_str().unwrap(), above, out);
        }
        above.pop();
    }
    walk(list, "all", &mut Vec::new(), &mut out);
    out
}

/// kwinctl's answer for one host of the imported inventory.
fn kwinctl_reach(inv: &Inventory, name: &str, ansible_groups: &BTreeSet<String>) -> Option<Reach> {
    let h = inv.host(name)?;
    let connect = h.reach().to_string();
    // an Ansible group is a declared group of the same name, or NAME-ansible
    // where the name is one of kwinctl's built-in groups
    let mut groups = BTreeSet::new();
    for g in ansible_groups {
        for candidate in [g.clone(), format!("{}-ansible", g.to_ascii_lowercase())] {
            if inv
                .group_members(&candidate)
                .is_some_and(|m| m.iter().any(|x| x.name == name))
            {
                groups.insert(g.clone());
            }
        }
    }
    for g in &h.groups {
        let g = g.strip_suffix("-ansible").unwrap_or(g);
        if !ansible_groups.iter().any(|a| a.eq_ignore_ascii_case(g)) {
            groups.insert(format!("{g} (not in Ansible)"));
        }
    }
    let ip = Some(h.address.to_string());
    Some(match &h.connection {
        Connection::Ssh(s) => Reach {
            os: h.os,
            plugin: "ssh".into(),
            connect,
            ip,
            port: s.port.unwrap_or(22),
            user: s.user.clone(),
            key: s.identity.as_ref().map(|k| k.display().to_string()),
            tls: None,
            auth: None,
            groups,
        },
        Connection::WinRm(w) => Reach {
            os: h.os,
            plugin: "winrm".into(),
            connect,
            ip,
            port: w.port,
            user: Some(w.user.clone()),
            key: None,
            tls: Some(w.tls),
            auth: Some(w.auth),
            groups,
        },
    })
}

/// Fill in the cluster: placeholders as an operator would.
fn fill(s: &str) -> String {
    s.replace("name: FILL-IN", "name: imported")
        .replace("cluster_cidr: FILL-IN", "cluster_cidr: 10.244.0.0/16")
        .replace("service_cidr: FILL-IN", "service_cidr: 10.96.0.0/12")
        .replace("api_server: FILL-IN", "api_server: http://10.96.0.1:8080")
        .replace(
            "kubernetes_version: FILL-IN",
            "kubernetes_version: \"1.7.16\"",
        )
}

enum Outcome {
    /// Every host agrees with Ansible.
    Agree(usize),
    /// Refused, every problem with its position and a reason.
    Refused(usize),
    /// What differs.
    Differs(Vec<String>),
}

/// Every problem line (`FILE:LINE:COLUMN: reason`) names a file of the case
/// and a position in it.
fn positioned(stderr: &str, case: &Path) -> Result<usize, String> {
    let mut n = 0;
    for line in stderr.lines() {
        let line = line.strip_prefix("error: ").unwrap_or(line);
        if line.starts_with("    ") || line.trim().is_empty() || line.starts_with("warning: ") {
            continue;
        }
        let c = case.display().to_string();
        let Some(rest) = line.strip_prefix(&c) else {
            return Err(format!("a refusal that names no file of the case: {line}"));
        };
        let mut parts = rest.splitn(4, ':');
        let (_file, l, col, why) = (parts.next(), parts.next(), parts.next(), parts.next());
        let num = |s: Option<&str>| s.and_then(|s| s.parse::<usize>().ok()).unwrap_or(0);
        if num(l) == 0 || num(col) == 0 || why.is_none_or(|w| w.trim().is_empty()) {
            return Err(format!("a refusal without a position or a reason: {line}"));
        }
        n += 1;
    }
    if n == 0 {
        return Err(format!("refused without a problem line: {stderr}"));
    }
    Ok(n)
}

/// Both routes: the inventory file itself, and the JSON `ansible-inventory
/// --list` printed for it (the `--list` route of docs/import-ansible.md),
/// which must give the same answer when it is accepted.
fn run_case(case: &Path) -> Outcome {
    let inv = inventory_of(case);
    let scratch = tempfile::tempdir().unwrap();
    let expect = expect_of(case);
    let (list, warned) = match oracle(case, &inv, scratch.path()) {
        Ok(l) if expect == Expect::AnsibleRefuses => {
            return Outcome::Differs(vec![format!(
                "EXPECT says ansible-inventory refuses it, and it read it: {}",
                l.0
            )]);
        }
        Ok(l) => l,
        Err(e) if expect == Expect::AnsibleRefuses => {
            let hosts = BTreeMap::new();
            return match import_and_compare(&inv, case, &hosts, scratch.path(), "kwinctl.yaml") {
                (Outcome::Refused(_), _) => Outcome::Refused(0),
                (Outcome::Differs(d), _) => Outcome::Differs(d),
                (Outcome::Agree(_), _) => Outcome::Differs(vec![format!(
                    "ansible-inventory refuses it and the import accepted it:\n{e}"
                )]),
            };
        }
        Err(e) => panic!(
            "{}: ansible-inventory failed (a corpus case must be one Ansible reads, \
             or say EXPECT ansible-refuses)\n{e}",
            case.display()
        ),
    };
    let hosts = ansible_hosts(&list);
    let (file, said) = import_and_compare(&inv, case, &hosts, scratch.path(), "kwinctl.yaml");
    let mut missing: Vec<String> = duplicate_keys_warned(&warned)
        .into_iter()
        .filter(|w| !said.contains(&format!("warning: {w}")))
        .map(|w| format!("Ansible warns {w}, and the import did not:\n{said}"))
        .collect();
    let file = match (file, expect) {
        (Outcome::Refused(_), Expect::Agree) => Outcome::Differs(vec![format!(
            "EXPECT agree, and the import refused it:\n{said}"
        )]),
        (Outcome::Differs(mut d), _) => {
            d.append(&mut missing);
            Outcome::Differs(d)
        }
        (_, _) if !missing.is_empty() => Outcome::Differs(missing),
        (f, _) => f,
    };
    let json = scratch.path().join("list.json");
    std::fs::write(&json, serde_json::to_string_pretty(&list).unwrap()).unwrap();
    let (via_list, _) = import_and_compare(
        &json,
        scratch.path(),
        &hosts,
        scratch.path(),
        "from-list.yaml",
    );
    match (file, via_list) {
        (file, Outcome::Differs(d)) => {
            let mut all = match file {
                Outcome::Differs(f) => f,
                _ => Vec::new(),
            };
            all.extend(d.into_iter().map(|d| format!("(--list JSON route) {d}")));
            Outcome::Differs(all)
        }
        (file, _) => file,
    }
}

/// Import `inv` and compare every host with Ansible's answer; a refusal
/// must name a file under `files` for every problem. Also the import's
/// stderr.
fn import_and_compare(
    inv: &Path,
    files: &Path,
    hosts: &BTreeMap<String, (serde_json::Map<String, Value>, BTreeSet<String>)>,
    scratch: &Path,
    out_name: &str,
) -> (Outcome, String) {
    let mut said = String::new();
    let outcome = compare(inv, files, hosts, scratch, out_name, &mut said);
    (outcome, said)
}

fn compare(
    inv: &Path,
    files: &Path,
    hosts: &BTreeMap<String, (serde_json::Map<String, Value>, BTreeSet<String>)>,
    scratch: &Path,
    out_name: &str,
    said: &mut String,
) -> Outcome {
    let out = scratch.join(out_name);
    let mut cmd = Command::new(common::bin());
    cmd.args(["import", "ansible"])
        .arg(inv)
        .arg("-o")
        .arg(&out)
        .current_dir(scratch)
        .env("HOME", scratch);
    let o = common::run_bounded(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    said.push_str(&stderr);
    if o.status.code() == Some(2) && !out.exists() {
        return match positioned(&stderr, files) {
            Ok(_) => Outcome::Refused(hosts.len()),
            Err(e) => Outcome::Differs(vec![e]),
        };
    }
    if o.status.code() != Some(0) {
        return Outcome::Differs(vec![format!("import: {}", common::text(&o))]);
    }
    let text = fill(&std::fs::read_to_string(&out).unwrap());
    let parsed = match Inventory::parse(&out, &text) {
        Ok(i) => i,
        Err(e) => {
            return Outcome::Differs(vec![format!(
                "the imported inventory is not one kwinctl reads: {e}\n{text}"
            )]);
        }
    };
    let mut diffs = Vec::new();
    for (name, (vars, groups)) in hosts {
        // kwinctl expands `~` when it reads the inventory, with this HOME
        let home = PathBuf::from(std::env::var("HOME").unwrap_or_default());
        let want = ansible_reach(name, vars, groups.clone(), &home, scratch);
        let Some(want) = want else {
            diffs.push(format!(
                "{name}: Ansible connects with {:?}, and the import did not refuse it",
                vars.get("ansible_connection")
            ));
            continue;
        };
        let Some(mut got) = kwinctl_reach(&parsed, name, groups) else {
            diffs.push(format!("{name}: left out of the import without a word"));
            continue;
        };
        // kubespray's `ip` is the node's address when given; otherwise the
        // address is where Ansible connects
        let want_ip = want.ip.clone().unwrap_or_else(|| want.connect.clone());
        if got.ip.as_deref() != Some(want_ip.as_str()) {
            diffs.push(format!("{name}: address {:?}, Ansible's {want_ip}", got.ip));
        }
        got.ip = want.ip.clone();
        if want.plugin == "psrp" {
            got.plugin = "psrp".into();
        }
        if got != want {
            diffs.push(format!("{name}:\n  ansible {want:?}\n  kwinctl {got:?}"));
        }
    }
    for h in &parsed.hosts {
        if !hosts.contains_key(&h.name) {
            diffs.push(format!("{}: a host Ansible does not have", h.name));
        }
    }
    if diffs.is_empty() {
        Outcome::Agree(hosts.len())
    } else {
        Outcome::Differs(diffs)
    }
}

#[test]
fn every_corpus_inventory_imports_as_ansible_reads_it_or_is_refused_with_a_position() {
    let root = corpus();
    let known: BTreeSet<String> = std::fs::read_to_string(root.join("KNOWN"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let only = std::env::var("KWINCTL_CORPUS_CASE").ok();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .filter(|p| only.as_ref().is_none_or(|o| p.ends_with(o)))
        .collect();
    cases.sort();
    if only.is_none() {
        assert!(cases.len() >= 50, "the corpus has {} cases", cases.len());
    }
    let (mut agree, mut refused, mut differ) = (0, 0, 0);
    let (mut agree_hosts, mut refused_hosts) = (0, 0);
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(case.join("SOURCE")).unwrap_or_default();
        assert!(
            source.starts_with("SOURCE "),
            "{name}: a SOURCE file naming where the case was learned"
        );
        match run_case(case) {
            Outcome::Agree(n) => {
                agree += 1;
                agree_hosts += n;
                if known.contains(&name) {
                    failures.push(format!("{name}: agrees now: take it off KNOWN"));
                }
            }
            Outcome::Refused(n) => {
                refused += 1;
                refused_hosts += n;
                if known.contains(&name) {
                    failures.push(format!(
                        "{name}: refused with a position now: take it off KNOWN"
                    ));
                }
            }
            Outcome::Differs(d) => {
                differ += 1;
                eprintln!("{name}: SILENT DIFFERENCE\n  {}", d.join("\n  "));
                if !known.contains(&name) {
                    failures.push(format!("{name}: {}", d.join("\n  ")));
                }
            }
        }
    }
    eprintln!(
        "corpus: {} inventories: {agree} agree ({agree_hosts} hosts), {refused} refused with a position \
         ({refused_hosts} hosts), {differ} silent difference ({} of them known)",
        cases.len(),
        known.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
