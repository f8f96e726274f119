//! kwinctl against OpenSSH itself, case by case (tests/ssh_corpus/): every
//! resolution case is answered by `ssh -G -F CONFIG NAME` and by kwinctl's
//! resolver; every trust case is connected to a loopback sshd of our own
//! (127.0.0.1, a free port, its own host keys and certificates) by
//! `ssh -o BatchMode=yes` and by kwinctl. The outcomes are counted as agree /
//! refused with a reason the docs give / refused without one / UNSAFE
//! (kwinctl resolves another host, port, user or file, accepts a key OpenSSH
//! refuses, or runs a `Match exec` command). Fails on any unsafe case and on
//! any refusal docs/ssh-trust.md does not explain.
//!
//! Needs the OpenSSH client, server and ssh-keygen; not root (sshd runs as
//! the current user and logs in as that user).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kwinctl::transport::route::{Endpoint, Strict};
use kwinctl::transport::sshconf::Overrides;
use kwinctl::transport::{ConfigSource, ConnectOptions, Routes, Trace, TransportError};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ssh_corpus");
const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ssh-trust.md");

/// One case of the corpus.
#[derive(Debug, Clone, Default)]
struct Case {
    file: String,
    name: String,
    head: BTreeMap<String, Vec<String>>,
    blocks: Vec<(String, String)>,
}

impl Case {
    fn get(&self, k: &str) -> Option<&str> {
        self.head.get(k).and_then(|v| v.first()).map(String::as_str)
    }
    fn block(&self, k: &str) -> Option<&str> {
        self.blocks
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, t)| t.as_str())
    }
}

fn parse_corpus(kind: &str) -> Vec<Case> {
    let dir = Path::new(CORPUS).join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let mut cases: Vec<Case> = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let fname = f.file_name().unwrap().to_string_lossy().into_owned();
        let mut cur: Option<Case> = None;
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("=== ") {
                cases.extend(cur.take());
                cur = Some(Case {
                    file: fname.clone(),
                    name: n.trim().to_string(),
                    ..Default::default()
                });
                continue;
            }
            let Some(c) = cur.as_mut() else { continue };
            if let Some(b) = line.strip_prefix("--- ") {
                c.blocks.push((b.trim().to_string(), String::new()));
            } else if let Some((_, t)) = c.blocks.last_mut() {
                t.push_str(line);
                t.push('\n');
            } else if let Some((k, v)) = line.split_once(": ") {
                c.head
                    .entry(k.trim().to_string())
                    .or_default()
                    .push(v.to_string());
            }
        }
        cases.extend(cur);
    }
    // `like: other`: the other case's blocks
    let all = cases.clone();
    for c in &mut cases {
        if let Some(l) = c.get("like").map(str::to_string) {
            let o = all
                .iter()
                .find(|o| o.name == l)
                .expect("like: names a case");
            c.blocks = o.blocks.clone();
        }
    }
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names are unique");
    cases
}

/// What one side decided.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    /// Resolution: the compared settings; trust: "accept".
    Yes(BTreeMap<&'static str, String>),
    No(String),
}

#[derive(Debug, Default)]
struct Tally {
    agree: Vec<String>,
    refused_listed: Vec<String>,
    refused_unlisted: Vec<String>,
    unsafe_: Vec<String>,
}

impl Tally {
    fn print(&self, what: &str) {
        eprintln!(
            "{what}: {} cases: {} agree, {} refused with a reason (docs/ssh-trust.md), {} refused without one (disagree-safe), {} UNSAFE",
            self.agree.len()
                + self.refused_listed.len()
                + self.refused_unlisted.len()
                + self.unsafe_.len(),
            self.agree.len(),
            self.refused_listed.len(),
            self.refused_unlisted.len(),
            self.unsafe_.len()
        );
        for r in &self.refused_listed {
            eprintln!("  refused (listed): {r}");
        }
        for r in &self.refused_unlisted {
            eprintln!("  refused (NOT in docs/ssh-trust.md): {r}");
        }
        for u in &self.unsafe_ {
            eprintln!("  UNSAFE: {u}");
        }
    }
    fn judge(&mut self, case: &Case, openssh: Said, kwinctl: Said, ran: bool) {
        let id = format!("{}:{}", case.file, case.name);
        if ran {
            self.unsafe_
                .push(format!("{id}: kwinctl ran the Match exec command"));
            return;
        }
        match (&openssh, &kwinctl) {
            (Said::No(_), Said::No(_)) => self.agree.push(id),
            (Said::Yes(a), Said::Yes(b)) if a == b => self.agree.push(id),
            (Said::Yes(a), Said::Yes(b)) => {
                let diff: Vec<String> = a
                    .iter()
                    .filter(|(k, v)| b.get(*k) != Some(v))
                    .map(|(k, v)| {
                        let short = |s: &str| clip(s).chars().take(80).collect::<String>();
                        format!(
                            "{k}: openssh {:?} kwinctl {:?}",
                            short(v),
                            b.get(k).map(|s| short(s))
                        )
                    })
                    .collect();
                self.unsafe_.push(format!("{id}: {}", diff.join("; ")));
            }
            (Said::No(why), Said::Yes(_)) => self
                .unsafe_
                .push(format!("{id}: OpenSSH refuses ({why}), kwinctl does not")),
            (Said::Yes(_), Said::No(why)) => {
                if documented().iter().any(|p| why.contains(p.as_str())) {
                    self.refused_listed.push(format!("{id}: {}", clip(why)));
                } else {
                    self.refused_unlisted.push(format!("{id}: {}", clip(why)));
                }
            }
        }
    }
}

fn clip(s: &str) -> String {
    let s = s.replace('\n', " | ");
    if s.len() > 300 {
        format!("{}...", &s[..s.floor_char_boundary(300)])
    } else {
        s
    }
}

/// The refusals docs/ssh-trust.md explains: the `phrase` of each line
/// `- \`phrase\`: reason` under "Where kwinctl refuses".
fn documented() -> Vec<String> {
    let text = std::fs::read_to_string(DOCS).unwrap_or_default();
    let mut on = false;
    let mut out = Vec::new();
    for l in text.lines() {
        if l.starts_with('#') {
            on = l.contains("Where kwinctl refuses");
            continue;
        }
        if on
            && let Some(r) = l.strip_prefix("- `")
            && let Some((p, _)) = r.split_once('`')
        {
            out.push(p.to_string());
        }
    }
    out
}

fn me() -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap()
}

fn home() -> PathBuf {
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .map(|u| u.dir)
        .unwrap()
}

/// Write the case's files under `dir` (`@DIR@` replaced); the config path.
fn materialise(case: &Case, dir: &Path, subst: &dyn Fn(&str) -> String) -> PathBuf {
    let cfg = dir.join(case.get("config-name").unwrap_or("config"));
    for (name, text) in &case.blocks {
        let text = subst(text).replace("@DIR@", &dir.display().to_string());
        let path = if name == "config" {
            cfg.clone()
        } else if let Some(f) = name.strip_prefix("file ") {
            dir.join(f)
        } else {
            continue;
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    cfg
}

// ---------------------------------------------------------------------------
// resolution

/// OpenSSH's connection-time expansion of a path value (`~`, `${VAR}`, `%`
/// tokens of ssh_config(5) TOKENS for 9.2): `None` where ssh would fail.
fn expand(v: &str, g: &BTreeMap<String, String>, name: &str) -> Option<String> {
    let v = if v == "~" {
        home().display().to_string()
    } else if let Some(r) = v.strip_prefix("~/") {
        format!("{}/{r}", home().display())
    } else if let Some((who, r)) = v.strip_prefix('~').and_then(|r| r.split_once('/')) {
        let u = nix::unistd::User::from_name(who).ok().flatten()?;
        format!("{}/{r}", u.dir.display())
    } else {
        v.to_string()
    };
    let mut out = String::new();
    let mut cs = v.chars().peekable();
    while let Some(c) = cs.next() {
        match c {
            '%' => match cs.next()? {
                '%' => out.push('%'),
                'd' => out.push_str(&home().display().to_string()),
                'h' => out.push_str(&g["hostname"]),
                'p' => out.push_str(&g["port"]),
                'r' => out.push_str(&g["user"]),
                'u' => out.push_str(&me()),
                'n' => out.push_str(name),
                'i' => out.push_str(&nix::unistd::Uid::current().to_string()),
                'k' => out.push_str(g.get("hostkeyalias").map_or(name, |s| s.as_str())),
                _ => return None,
            },
            '$' if cs.peek() == Some(&'{') => {
                cs.next();
                let var: String = cs.by_ref().take_while(|c| *c != '}').collect();
                out.push_str(&std::env::var(&var).ok()?);
            }
            c => out.push(c),
        }
    }
    Some(out)
}

fn overrides(case: &Case) -> Overrides {
    Overrides {
        user: case.get("user").map(str::to_string),
        port: case.get("port").map(|p| p.parse().unwrap()),
        identity: None,
        known_hosts: None,
    }
}

fn openssh_resolves(case: &Case, cfg: &Path, dir: &Path) -> Said {
    let dest = case.get("dest").unwrap();
    let mut c = Command::new("ssh");
    c.arg("-G").arg("-F").arg(cfg);
    if let Some(u) = case.get("user") {
        c.arg("-l").arg(u);
    }
    if let Some(p) = case.get("port") {
        c.arg("-p").arg(p);
    }
    if let Some(i) = case.get("identity") {
        c.arg("-i")
            .arg(i.replace("@DIR@", &dir.display().to_string()));
    }
    let out = c.arg("--").arg(dest).stdin(Stdio::null()).output().unwrap();
    if !out.status.success() {
        return Said::No(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let mut g: BTreeMap<String, String> = BTreeMap::new();
    let mut ids = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((k, v)) = l.split_once(' ') else {
            continue;
        };
        if k == "identityfile" {
            ids.push(v.to_string());
        } else {
            g.insert(k.to_string(), v.to_string());
        }
    }
    let mut ids_x = Vec::new();
    for i in &ids {
        match expand(i, &g, dest) {
            Some(x) => ids_x.push(x),
            None => return Said::No(format!("ssh cannot expand IdentityFile {i}")),
        }
    }
    let revoked = match g.get("revokedhostkeys") {
        Some(r) => match expand(r, &g, dest) {
            Some(x) => x,
            None => return Said::No(format!("ssh cannot expand RevokedHostKeys {r}")),
        },
        None => String::new(),
    };
    let strict = match g["stricthostkeychecking"].as_str() {
        "true" | "ask" => "yes",
        "accept-new" => "accept-new",
        _ => "no",
    };
    let mut m = BTreeMap::new();
    m.insert("hostname", g["hostname"].clone());
    m.insert("port", g["port"].clone());
    m.insert("user", g["user"].clone());
    m.insert("identityfile", ids_x.join(" | "));
    m.insert("proxyjump", g.get("proxyjump").cloned().unwrap_or_default());
    m.insert(
        "hostkeyalias",
        g.get("hostkeyalias").cloned().unwrap_or_default(),
    );
    m.insert("stricthostkeychecking", strict.into());
    m.insert(
        "userknownhostsfile",
        g.get("userknownhostsfile")
            .filter(|v| *v != "none")
            .cloned()
            .unwrap_or_default(),
    );
    m.insert("hostkeyalgorithms", g["hostkeyalgorithms"].clone());
    m.insert("casignaturealgorithms", g["casignaturealgorithms"].clone());
    m.insert("revokedhostkeys", revoked);
    Said::Yes(m)
}

/// A `ProxyJump` as kwinctl will follow it: each hop `[user@]host[:port]`
/// as the jump spec gave it (hops resolve their own config as OpenSSH's).
fn jump_spec(e: &Endpoint) -> String {
    e.hops()
        .iter()
        .map(|h| h.name.clone())
        .collect::<Vec<_>>()
        .join(",")
}

fn kwinctl_resolves(case: &Case, cfg: &Path, dir: &Path) -> Said {
    let mut o = overrides(case);
    o.identity = case
        .get("identity")
        .map(|i| PathBuf::from(i.replace("@DIR@", &dir.display().to_string())));
    match kwinctl::transport::resolve::resolve_name(
        &ConfigSource::File(cfg.to_path_buf()),
        case.get("dest").unwrap(),
        &o,
    ) {
        Ok(e) => fields(&e),
        Err(e) => Said::No(e),
    }
}

/// The settings compared, as kwinctl resolved them.
fn fields(e: &Endpoint) -> Said {
    let mut m = BTreeMap::new();
    m.insert("hostname", e.host.clone());
    m.insert("port", e.port.to_string());
    m.insert("user", e.user.clone());
    m.insert(
        "identityfile",
        e.identities
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    m.insert("proxyjump", jump_spec(e));
    m.insert("hostkeyalias", e.host_key_alias.clone().unwrap_or_default());
    m.insert(
        "stricthostkeychecking",
        match e.strict {
            Strict::Yes => "yes",
            Strict::AcceptNew => "accept-new",
            Strict::No => "no",
        }
        .into(),
    );
    m.insert(
        "userknownhostsfile",
        e.user_known_hosts
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
    );
    m.insert(
        "hostkeyalgorithms",
        e.host_key_algorithms
            .as_ref()
            .map(|v| v.join(","))
            .unwrap_or_else(|| "(not applied)".into()),
    );
    m.insert(
        "casignaturealgorithms",
        e.ca_signature_algorithms
            .as_ref()
            .map(|v| v.join(","))
            .unwrap_or_else(|| "(not applied)".into()),
    );
    m.insert(
        "revokedhostkeys",
        e.revoked_host_keys
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    );
    Said::Yes(m)
}

/// Many names through one resolver (answers shared between names matched
/// by the same `Host` lines), each compared with its own `ssh -G`: a config
/// of 100 Host blocks, and the system's /etc/ssh/ssh_config.
#[test]
fn class_answers_are_what_ssh_g_says() {
    let d = tempfile::tempdir().unwrap();
    let mut cfg = String::from("Host bastion\n  HostName 198.18.9.1\n  User jump\n");
    for i in 0..100 {
        match i % 5 {
            0 => cfg += &format!("Host n{i}\n  HostName 198.18.1.{i}\n  Port {}\n", 2000 + i),
            1 if i % 3 == 0 => {
                std::fs::write(
                    d.path().join(format!("inc{i}.conf")),
                    format!("Port 0{i}\nHost m{i}\n  User im{i}\n"),
                )
                .unwrap();
                cfg += &format!(
                    "Host n{i} m{i}\n  Include {}/inc{i}.conf\n  User u{i}\n  HostName Up{i}.Example.Test\n",
                    d.path().display()
                );
            }
            1 => cfg += &format!("Host n{i} m{i}\n  User u{i}\n"),
            2 => cfg += &format!("Host n{i}? !n{i}9\n  IdentityFile /k/{i}\n"),
            3 => cfg += &format!("Host n{i}\n  HostName n{}\n", i + 1),
            _ => cfg += &format!("Host *.z{i}.test\n  ProxyJump bastion\n  Port 22{i:02}\n"),
        }
    }
    cfg += "Host 198.18.1.* !198.18.1.7\n  UserKnownHostsFile /kh/lab\nHost *\n  IdentityFile ~/.ssh/id_ed25519\n";
    let path = d.path().join("config");
    std::fs::write(&path, &cfg).unwrap();
    let mut names: Vec<String> = Vec::new();
    for i in [
        0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16, 21, 22, 23, 36, 51, 99,
    ] {
        names.extend([
            format!("n{i}"),
            format!("m{i}"),
            format!("n{i}1"),
            format!("n{i}9"),
        ]);
        names.push(format!("h{i}.z{i}.test"));
        names.push(format!("198.18.1.{i}"));
    }
    names.extend([
        "N3".into(),
        "n4".into(),
        "198.18.1.7".into(),
        "bastion".into(),
        "x".into(),
        "y".into(),
    ]);
    for source in [path.clone(), PathBuf::from("/etc/ssh/ssh_config")] {
        if !source.is_file() {
            continue;
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let ours = kwinctl::transport::resolve::resolve_names(
            &ConfigSource::File(source.clone()),
            &refs,
            &Overrides::default(),
        )
        .unwrap();
        let mut t = Tally::default();
        for (n, e) in names.iter().zip(ours) {
            let case = Case {
                file: source.display().to_string(),
                name: n.clone(),
                head: BTreeMap::from([("dest".to_string(), vec![n.clone()])]),
                blocks: Vec::new(),
            };
            let mut theirs = openssh_resolves(&case, &source, d.path());
            if let Said::Yes(m) = &mut theirs {
                let names = openssh_jump_names(&m["proxyjump"]);
                m.insert("proxyjump", names);
            }
            let ours = match e {
                Ok(e) => fields(&e),
                Err(e) => Said::No(e),
            };
            t.judge(&case, theirs, ours, false);
        }
        t.print(&format!("shared answers, {}", source.display()));
        assert_eq!(t.agree.len(), names.len(), "{}", source.display());
    }
}

/// The jump spec as kwinctl records the hops: host names in order (the
/// user and port of each hop are compared by resolving it, below).
fn openssh_jump_names(spec: &str) -> String {
    if spec.is_empty() || spec == "none" {
        return String::new();
    }
    kwinctl::transport::route::parse_jumps(spec)
        .map(|v| v.into_iter().map(|j| j.host).collect::<Vec<_>>().join(","))
        .unwrap_or_else(|e| format!("(unparsable: {e})"))
}

#[test]
fn resolution_matches_openssh() {
    let cases = parse_corpus("resolve");
    let mut t = Tally::default();
    for case in &cases {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        // the same files for both sides; kwinctl first, so a command it ran
        // shows before OpenSSH's own run of it
        for (k, v) in case
            .head
            .get("env")
            .into_iter()
            .flatten()
            .filter_map(|e| e.split_once('='))
        {
            // SAFETY: the test binary runs this one test's cases in turn;
            // the variables are unique to the corpus.
            unsafe { std::env::set_var(k, v) };
        }
        let cfg = materialise(case, dir, &|s| s.to_string());
        let ours = kwinctl_resolves(case, &cfg, dir);
        let ran = case.get("marker").is_some_and(|m| dir.join(m).exists());
        let mut theirs = openssh_resolves(case, &cfg, dir);
        if let Said::Yes(m) = &mut theirs {
            let names = openssh_jump_names(&m["proxyjump"]);
            m.insert("proxyjump", names);
        }
        for (k, _) in case
            .head
            .get("env")
            .into_iter()
            .flatten()
            .filter_map(|e| e.split_once('='))
        {
            unsafe { std::env::remove_var(k) };
        }
        t.judge(case, theirs, ours, ran);
    }
    t.print("ssh_config resolution");
    assert!(cases.len() >= 100, "{} resolution cases", cases.len());
    assert!(
        t.unsafe_.is_empty(),
        "{} unsafe disagreements",
        t.unsafe_.len()
    );
    assert!(
        t.refused_unlisted.is_empty(),
        "{} refusals docs/ssh-trust.md does not explain",
        t.refused_unlisted.len()
    );
}

// ---------------------------------------------------------------------------
// trust

struct Sshd(Child);

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn keygen(args: &[&str]) {
    let out = Command::new("ssh-keygen")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pubkey(p: &Path) -> String {
    let t = std::fs::read_to_string(p).unwrap();
    let mut w = t.split_whitespace();
    format!("{} {}", w.next().unwrap(), w.next().unwrap())
}

/// Host keys, authorities, certificates and one sshd per profile.
struct Fixture {
    dir: tempfile::TempDir,
    ports: BTreeMap<&'static str, u16>,
    _servers: Vec<Sshd>,
}

/// (profile, host keys, certificate: (CA, signature type, extra ssh-keygen
/// arguments)).
type Profile = (
    &'static str,
    &'static [&'static str],
    Option<(&'static str, &'static str, &'static [&'static str])>,
);

const PROFILES: &[Profile] = &[
    ("plain", &["h_ed25519", "h_ecdsa", "h_rsa"], None),
    ("rsa", &["h_rsa"], None),
    (
        "cert",
        &["h_ed25519"],
        Some(("ca", "ssh-ed25519", &["-n", "127.0.0.1"])),
    ),
    (
        "cert-noprinc",
        &["h_ed25519"],
        Some(("ca", "ssh-ed25519", &[])),
    ),
    (
        "cert-wrongprinc",
        &["h_ed25519"],
        Some(("ca", "ssh-ed25519", &["-n", "other.example.test"])),
    ),
    (
        "cert-wildprinc",
        &["h_ed25519"],
        Some(("ca", "ssh-ed25519", &["-n", "127.0.0.*"])),
    ),
    (
        "cert-expired",
        &["h_ed25519"],
        Some((
            "ca",
            "ssh-ed25519",
            &["-n", "127.0.0.1", "-V", "20000101:20010101"],
        )),
    ),
    (
        "cert-future",
        &["h_ed25519"],
        Some((
            "ca",
            "ssh-ed25519",
            &["-n", "127.0.0.1", "-V", "20900101:20910101"],
        )),
    ),
    (
        "cert-critical",
        &["h_ed25519"],
        Some((
            "ca",
            "ssh-ed25519",
            &["-n", "127.0.0.1", "-O", "critical:unknown@example.test=x"],
        )),
    ),
    (
        "cert-rsa-sha1",
        &["h_ed25519"],
        Some(("carsa", "ssh-rsa", &["-n", "127.0.0.1"])),
    ),
    (
        "cert-rsa-sha2",
        &["h_ed25519"],
        Some(("carsa", "rsa-sha2-512", &["-n", "127.0.0.1"])),
    ),
    (
        "cert-alias",
        &["h_ed25519"],
        Some(("ca", "ssh-ed25519", &["-n", "alias-name"])),
    ),
];

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let p = |n: &str| d.join(n).display().to_string();
        for (n, t) in [
            ("h_ed25519", "ed25519"),
            ("h_ecdsa", "ecdsa"),
            ("h_rsa", "rsa"),
            ("ca", "ed25519"),
            ("carsa", "rsa"),
            ("other", "ed25519"),
            ("id", "ed25519"),
        ] {
            keygen(&["-q", "-t", t, "-N", "", "-C", "", "-f", &p(n)]);
        }
        std::fs::copy(d.join("id.pub"), d.join("authorized_keys")).unwrap();
        let mut ports = BTreeMap::new();
        let mut servers = Vec::new();
        for (name, keys, cert) in PROFILES {
            let port = free_port();
            let mut conf = format!(
                "ListenAddress 127.0.0.1:{port}\nAuthorizedKeysFile {}\nStrictModes no\nPidFile none\n\
                 UsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nLogLevel ERROR\n",
                p("authorized_keys")
            );
            for k in *keys {
                conf += &format!("HostKey {}\n", p(k));
            }
            if let Some((ca, sig, extra)) = cert {
                let base = format!("p_{name}");
                std::fs::copy(d.join("h_ed25519.pub"), d.join(format!("{base}.pub"))).unwrap();
                let mut args = vec![
                    "-q".to_string(),
                    "-s".into(),
                    p(ca),
                    "-t".into(),
                    sig.to_string(),
                    "-h".into(),
                    "-I".into(),
                    "hostcert".into(),
                    "-z".into(),
                    "7".into(),
                ];
                args.extend(extra.iter().map(|s| s.to_string()));
                args.push(p(&format!("{base}.pub")));
                keygen(&args.iter().map(String::as_str).collect::<Vec<_>>());
                conf += &format!("HostCertificate {}\n", p(&format!("{base}-cert.pub")));
            }
            let cf = d.join(format!("sshd_{name}.conf"));
            std::fs::write(&cf, conf).unwrap();
            let child = Command::new("/usr/sbin/sshd")
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&cf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("/usr/sbin/sshd (openssh-server) is needed");
            servers.push(Sshd(child));
            ports.insert(*name, port);
        }
        // every server listening (bounded)
        for (name, port) in &ports {
            let t0 = std::time::Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "sshd {name} did not start"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Fixture {
            dir,
            ports,
            _servers: servers,
        }
    }

    fn key(&self, n: &str) -> String {
        pubkey(&self.dir.path().join(format!("{n}.pub")))
    }

    /// The case's files under `dir`, for the server `port`; the config.
    fn setup(&self, case: &Case, dir: &Path, port: u16) -> PathBuf {
        let hp = format!("[127.0.0.1]:{port}");
        let keys = [
            ("@ED25519@", self.key("h_ed25519")),
            ("@ECDSA@", self.key("h_ecdsa")),
            ("@RSA@", self.key("h_rsa")),
            ("@CARSA@", self.key("carsa")),
            ("@CA@", self.key("ca")),
            ("@OTHER@", self.key("other")),
        ];
        let subst = |s: &str| {
            let mut s = s.replace("@HP@", &hp).replace("@PORT@", &port.to_string());
            for (k, v) in &keys {
                s = s.replace(k, v);
            }
            s.replace("@DIR@", &dir.display().to_string())
        };
        for (f, b) in [
            ("known_hosts", "known_hosts"),
            ("global_known_hosts", "global_known_hosts"),
            ("revoked", "revoked"),
        ] {
            let text = case.block(b).map(&subst).unwrap_or_default();
            if b != "revoked" || case.block(b).is_some() {
                std::fs::write(dir.join(f), text).unwrap();
            }
        }
        if case.get("hash") == Some("yes") {
            keygen(&[
                "-q",
                "-H",
                "-f",
                &dir.join("known_hosts").display().to_string(),
            ]);
        }
        if let Some(spec) = case.block("krl") {
            let sf = dir.join("krl.spec");
            std::fs::write(&sf, subst(spec)).unwrap();
            let krl = dir.join("krl").display().to_string();
            let spec = sf.display().to_string();
            match case.get("krl-ca") {
                Some(_) => {
                    let ca = self.dir.path().join("ca.pub").display().to_string();
                    keygen(&["-q", "-k", "-f", &krl, "-s", &ca, &spec])
                }
                None => keygen(&["-q", "-k", "-f", &krl, &spec]),
            }
        }
        let extra = materialise(case, dir, &subst);
        let extra = std::fs::read_to_string(&extra).unwrap_or_default();
        let cfg = dir.join("config");
        let base = format!(
            "Host target\n  HostName 127.0.0.1\n  Port {port}\n  User {}\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             IdentityAgent none\n  BatchMode yes\n  UserKnownHostsFile {}\n  GlobalKnownHostsFile {}\n  \
             ConnectTimeout 20\n  UpdateHostKeys no\n  CheckHostIP no\n  LogLevel ERROR\n",
            me(),
            self.dir.path().join("id").display(),
            dir.join("known_hosts").display(),
            dir.join("global_known_hosts").display(),
        );
        std::fs::write(&cfg, format!("{extra}{base}")).unwrap();
        cfg
    }
}

fn openssh_trusts(cfg: &Path) -> Said {
    let mut c = Command::new("timeout");
    c.args(["60", "ssh", "-F"])
        .arg(cfg)
        .args(["target", "true"]);
    let out = c.stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.status.success() || err.contains("Permission denied") {
        Said::Yes(BTreeMap::from([("host key", "accepted".to_string())]))
    } else {
        Said::No(err)
    }
}

fn kwinctl_trusts(cfg: &Path) -> Said {
    let ep = match kwinctl::transport::resolve::resolve_name(
        &ConfigSource::File(cfg.to_path_buf()),
        "target",
        &Overrides::default(),
    ) {
        Ok(e) => std::sync::Arc::new(e),
        Err(e) => return Said::No(e),
    };
    let opts = ConnectOptions::new(Duration::from_secs(30), false, Routes::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(kwinctl::transport::ssh::open(&ep, &opts, &Trace::new(), ""));
    match r {
        Ok(_) | Err(TransportError::Auth { .. }) => {
            Said::Yes(BTreeMap::from([("host key", "accepted".to_string())]))
        }
        Err(e) => Said::No(e.to_string()),
    }
}

#[test]
fn host_trust_matches_openssh() {
    let cases = parse_corpus("trust");
    let fx = Fixture::new();
    let mut t = Tally::default();
    for case in &cases {
        let server = case.get("server").expect("server:");
        let port = *fx
            .ports
            .get(server)
            .unwrap_or_else(|| panic!("profile {server}"));
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let theirs = openssh_trusts(&fx.setup(case, a.path(), port));
        let ours = kwinctl_trusts(&fx.setup(case, b.path(), port));
        t.judge(case, theirs, ours, false);
    }
    t.print("host key trust");
    assert!(cases.len() >= 60, "{} trust cases", cases.len());
    assert!(
        t.unsafe_.is_empty(),
        "{} unsafe disagreements",
        t.unsafe_.len()
    );
    assert!(
        t.refused_unlisted.is_empty(),
        "{} refusals docs/ssh-trust.md does not explain",
        t.refused_unlisted.len()
    );
}

// ---------------------------------------------------------------------------
// Match exec: no spelling runs a command

use proptest::prelude::*;
use proptest::sample::select;

/// A config whose `Match ... exec "touch MARKER"` is spelt and placed in one
/// of many ways OpenSSH accepts; `None` where the placement needs no
/// include.
fn exec_config(dir: &Path, m: &[&str; 6], place: usize) -> PathBuf {
    let marker = dir.join("MARKER");
    let cmd = match m[5] {
        "dq" => format!("\"touch {}\"", marker.display()),
        "sq" => format!("'touch {}'", marker.display()),
        _ => format!("\"touch\t{}\"", marker.display()),
    };
    let line = format!(
        "{}{}{}{}{}{cmd}\n  User ran\n",
        m[0], m[1], m[2], m[3], m[4]
    );
    let inc = dir.join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(inc.join("a.conf"), &line).unwrap();
    std::fs::write(
        dir.join("nested.conf"),
        format!("Include {}/a.conf\n", inc.display()),
    )
    .unwrap();
    let d = inc.display();
    let main = match place {
        0 => line.clone(),
        1 => format!("Include {d}/a.conf\n"),
        2 => format!("Include \"{d}/a.conf\"\n"),
        3 => format!("Include {d}/*.conf\n"),
        4 => format!("Include {d}/?.conf\n"),
        5 => format!("Include {d}/[a].conf\n"),
        6 => format!("Host x\n  Include {d}/a.conf\n"),
        7 => format!("Match all\n  Include {d}/a.conf\n"),
        8 => format!("Include {}\n", dir.join("nested.conf").display()),
        9 => format!("include={d}/a.conf\n"),
        10 => format!("INCLUDE\t{d}/*\n"),
        _ => format!("Host *\nInclude {d}/a.conf {d}/none.conf\n"),
    };
    let cfg = dir.join("config");
    std::fs::write(&cfg, main).unwrap();
    cfg
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_match_exec_command_runs(
        kw in select(vec!["Match", "match", "MATCH", " Match", "\tMatch"]),
        sep in select(vec![" ", "\t", "=", " ="]),
        before in select(vec!["", "host x ", "all ", "host=x ", "!host zz ", "originalhost x "]),
        exec in select(vec!["exec", "EXEC", "Exec", "!exec", "!EXEC"]),
        join in select(vec![" ", "=", "\t"]),
        quote in select(vec!["dq", "sq", "tab"]),
        place in 0usize..12,
    ) {
        let d = tempfile::tempdir().unwrap();
        let cfg = exec_config(d.path(), &[kw, sep, before, exec, join, quote], place);
        let r = kwinctl::transport::resolve::resolve_name(
            &ConfigSource::File(cfg.clone()),
            "x",
            &Overrides::default(),
        );
        prop_assert!(!d.path().join("MARKER").exists(), "a command ran: {}", std::fs::read_to_string(&cfg).unwrap());
        // and the config was not taken as if the block were not there
        if let Ok(e) = r {
            prop_assert_ne!(e.user, "ran");
        }
    }
}

/// The fuzz test's configs are live: OpenSSH itself runs the command of
/// the plainest one (so the property above is not vacuous).
#[test]
fn the_exec_configs_do_run_under_openssh() {
    let d = tempfile::tempdir().unwrap();
    for place in [0, 3, 6] {
        let cfg = exec_config(d.path(), &["Match", " ", "", "exec", " ", "dq"], place);
        let _ = std::fs::remove_file(d.path().join("MARKER"));
        let out = Command::new("ssh")
            .args(["-G", "-F"])
            .arg(&cfg)
            .arg("x")
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(d.path().join("MARKER").exists(), "place {place}");
    }
}

/// kwinctl's default user (root) is applied as `ssh -l root` would apply
/// it, also for an operator who is not root: `Match user root` sees root
/// when the config gives the host no user, and a `User` set only under
/// `Match final` wins over the default. (Runs `kwinctl plan` as
/// `nobody` through setpriv, in a network namespace of its own; needs
/// root.)
#[test]
fn the_default_user_is_ssh_l_root_for_a_non_root_operator() {
    if !nix::unistd::Uid::current().is_root() {
        eprintln!("skipped: needs root to run kwinctl as nobody");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let cfg = d.path().join("config");
    std::fs::write(
        &cfg,
        "Match user root\n  Port 2999\nMatch final host 198.18.1.3\n  User finaluser\n",
    )
    .unwrap();
    let inv = d.path().join("inv.yaml");
    std::fs::write(
        &inv,
        "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\n\
         hosts:\n  - name: a\n    os: linux\n    address: 198.18.1.2\n  - name: b\n    os: linux\n    address: 198.18.1.3\n",
    )
    .unwrap();
    for f in [&cfg, &inv] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    }
    // in a network namespace of its own (no route anywhere): nothing is
    // contacted, the plan shows the routes
    let out = Command::new("unshare")
        .args([
            "--net",
            "--",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
        ])
        .arg(common::bin())
        .args(["plan", "--timeout", "5", "--retries", "0", "-i"])
        .arg(&inv)
        .arg("--ssh-config")
        .arg(&cfg)
        .current_dir(d.path())
        .env("HOME", d.path())
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ssh root@198.18.1.2:2999"), "{text}");
    // b: the config's own User (from the final pass) wins, and `Match user
    // root` saw the local user, as `ssh b` run by nobody sees it
    assert!(text.contains("ssh finaluser@198.18.1.3:22"), "{text}");
}
