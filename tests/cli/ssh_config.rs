//! A corpus of ssh_config files, each resolved by kwinctl and compared with
//! what `ssh -G` itself says for the same name (OpenSSH is the reference):
//! Match before Host, Include with a glob, patterns on addresses, negation,
//! `%h` tokens, ProxyJump chains; and the configs kwinctl must refuse
//! (Match exec, ProxyCommand, a name given settings its address does not
//! get), each naming the file and line; and the same refusals from the
//! command line (exit 2, nothing contacted). Needs the OpenSSH client, not
//! root.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use kwinctl::inventory::Inventory;
use kwinctl::transport::route::Endpoint;
use kwinctl::transport::{ConfigSource, Route, resolve};

const CLUSTER: &str = "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\n";

/// Resolve `(name, address)` hosts with `config`.
fn endpoints(dir: &Path, config: &str, hosts: &[(&str, &str)]) -> Result<Vec<Endpoint>, String> {
    let cfg = dir.join("config");
    std::fs::write(&cfg, config).unwrap();
    let mut inv = format!("{CLUSTER}hosts:\n");
    for (n, a) in hosts {
        inv += &format!("  - name: {n}\n    os: linux\n    address: {a}\n");
    }
    let inv = Inventory::parse(&dir.join("inv.yaml"), &inv).unwrap();
    let hs: Vec<_> = inv.hosts.iter().collect();
    let routes = resolve(&hs, &ConfigSource::File(cfg))?;
    Ok(hosts
        .iter()
        .map(|(n, _)| match routes.get(n) {
            Some(Route::Ssh(e)) => (**e).clone(),
            r => panic!("{n}: {r:?}"),
        })
        .collect())
}

/// What `ssh -G` prints for `name`, one keyword (see [`ssh_g_all`]).
fn ssh_g(dir: &Path, name: &str, keyword: &str) -> String {
    ssh_g_all(dir, name).remove(keyword).unwrap_or_default()
}

#[test]
fn match_before_host_resolves_as_openssh() {
    let d = tempfile::tempdir().unwrap();
    let cfg = "Match host some-other-host\n  HostName 198.18.1.5\n  User nobody\n\
               Host node-a\n  HostName 198.18.1.2\n  User ops\nHost node-*\n  Port 2200\n";
    let e = endpoints(d.path(), cfg, &[("node-a", "198.18.1.2")]).unwrap();
    assert_eq!(e[0].host, ssh_g(d.path(), "node-a", "hostname"));
    assert_eq!(e[0].host, "198.18.1.2");
    assert_eq!(e[0].user, ssh_g(d.path(), "node-a", "user"));
    assert_eq!(e[0].port.to_string(), ssh_g(d.path(), "node-a", "port"));
    assert_eq!((e[0].user.as_str(), e[0].port), ("ops", 2200));
}

#[test]
fn address_patterns_negation_and_include() {
    let d = tempfile::tempdir().unwrap();
    let inc = d.path().join("conf.d");
    std::fs::create_dir(&inc).unwrap();
    std::fs::write(inc.join("10-ports.conf"), "Host 198.18.1.*\n  Port 2201\n").unwrap();
    let cfg = format!(
        "Host 198.18.1.* !198.18.1.3\n  User ops\nInclude {}/*.conf\n",
        inc.display()
    );
    let e = endpoints(
        d.path(),
        &cfg,
        &[
            ("h1", "198.18.1.2"),
            ("h2", "198.18.1.3"),
            ("h3", "198.18.2.2"),
        ],
    )
    .unwrap();
    // names are not aliases: the addresses are resolved, as `ssh ADDRESS`
    for (ep, addr) in e.iter().zip(["198.18.1.2", "198.18.1.3", "198.18.2.2"]) {
        assert_eq!(ep.host, addr);
        assert_eq!(ep.port.to_string(), ssh_g(d.path(), addr, "port"), "{addr}");
    }
    assert_eq!(e[0].user, ssh_g(d.path(), "198.18.1.2", "user"));
    assert_eq!(e[0].user, "ops");
    assert_eq!(e[0].port, 2201);
    // the negated address: no User (kwinctl's default, root), and the
    // Include inside the block it does not match is not read for it (an
    // Include under Host is conditional, as OpenSSH reads it)
    assert_eq!((e[1].user.as_str(), e[1].port), ("root", 22));
    assert_eq!((e[2].user.as_str(), e[2].port), ("root", 22));
}

#[test]
fn tokens_expand_as_openssh_expands_them() {
    let d = tempfile::tempdir().unwrap();
    let cfg = "Host web\n  HostName 198.18.1.%h\nHost *\n  IdentityFile /keys/%h-%p-%r-%n.key\n  \
               UserKnownHostsFile /kh/%h_%p\n";
    // `HostName 198.18.1.%h` makes no sense for `web`; a real name instead:
    let cfg = cfg.replace("198.18.1.%h", "%h.example.test");
    let e = endpoints(d.path(), &cfg, &[("web", "198.18.1.2")]).unwrap();
    assert_eq!(e[0].host, ssh_g(d.path(), "web", "hostname"));
    assert_eq!(e[0].host, "web.example.test");
    assert_eq!(
        e[0].identities,
        [Path::new("/keys/web.example.test-22-root-web.key")]
    );
    let kh = ssh_g(d.path(), "web", "userknownhostsfile");
    assert_eq!(e[0].user_known_hosts, [Path::new(&kh)]);
}

#[test]
fn proxyjump_chains_resolve_each_hop_with_its_own_config() {
    let d = tempfile::tempdir().unwrap();
    let cfg = "Host edge\n  HostName 198.18.1.2\n  User jumper\nHost inner\n  HostName 198.18.201.2\n  \
               ProxyJump nowhere\nHost t\n  HostName 198.18.202.2\n  ProxyJump edge,ops@inner:2222\n";
    let e = endpoints(d.path(), cfg, &[("t", "198.18.202.2")]).unwrap();
    assert_eq!(ssh_g(d.path(), "t", "proxyjump"), "edge,ops@inner:2222");
    let hops: Vec<String> = e[0].hops().iter().map(|h| h.addr()).collect();
    // inner's own ProxyJump is replaced by the hop before it, as ssh -J does
    assert_eq!(hops, ["jumper@198.18.1.2:22", "ops@198.18.201.2:2222"]);
}

#[test]
fn refused_configs_name_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let marker = d.path().join("ran");
    let cfg = format!(
        "Host a\n  User x\nMatch exec \"touch {}\"\n  User y\n",
        marker.display()
    );
    let e = endpoints(d.path(), &cfg, &[("h1", "198.18.1.2")]).unwrap_err();
    assert!(
        e.contains(&format!("{}:3:", d.path().join("config").display())),
        "{e}"
    );
    assert!(!marker.exists(), "Match exec ran");

    let e = endpoints(
        d.path(),
        "Host h1\n  HostName 198.18.1.2\n  ProxyCommand nc %h %p\n",
        &[("h1", "198.18.1.2")],
    )
    .unwrap_err();
    assert!(e.contains("proxycommand") && e.contains("config:3"), "{e}");

    // the name gets a User its address does not: refused, not dropped
    let e = endpoints(d.path(), "Host h1\n  User ops\n", &[("h1", "198.18.1.2")]).unwrap_err();
    assert!(
        e.contains("HostName 198.18.1.2") && e.contains("user"),
        "{e}"
    );
    // ... but `Host *` settings, tokens and all, are not the name's own,
    // even for a name that is part of other values (`ro` in `root`)
    let e = endpoints(
        d.path(),
        "Host *\n  IdentityFile /k/%h-%n-%r\n",
        &[("ro", "198.18.1.2")],
    )
    .unwrap();
    assert_eq!(
        e[0].identities,
        [Path::new("/k/198.18.1.2-198.18.1.2-root")]
    );

    let e = resolve(&[], &ConfigSource::File(d.path().join("nope"))).unwrap_err();
    assert!(e.contains("no such file"), "{e}");
}

/// `kwinctl plan` with `config` for one Linux host at 198.18.239.2 (an address no
/// lab uses: nothing answers there, so only a refusal before contact exits 2).
fn plan_with(dir: &Path, config: Option<&str>) -> std::process::Output {
    let inv = dir.join("inv.yaml");
    common::write(
        &inv,
        &format!("{CLUSTER}hosts:\n  - name: h1\n    os: linux\n    address: 198.18.239.2\n"),
    );
    let cfg = dir.join("config");
    if let Some(c) = config {
        common::write(&cfg, c);
    }
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "plan",
        "-i",
        inv.to_str().unwrap(),
        "--timeout",
        "1",
        "--retries",
        "0",
    ])
    .args(["--ssh-config", cfg.to_str().unwrap()])
    .env_remove("SSH_AUTH_SOCK")
    .env_remove("KWINCTL_SSH_CONFIG");
    common::run_bounded(cmd, std::time::Duration::from_secs(60))
}

/// Every refusal is bad input (exit 2) naming the file and line, before
/// any host is contacted; fbe0578 read a missing file as no file, dropped
/// `Match` and every keyword it did not know, and went on to connect.
#[test]
fn refusals_from_the_command_line_are_exit_2_with_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("config").display().to_string();
    let at3 = format!("{cfg}:3");
    let marker = d.path().join("ran");
    let match_exec = format!(
        "Host *\n  User ops\nMatch exec \"touch {}\"\n  User x\n",
        marker.display()
    );
    let h1 = |line: &str| format!("Host h1\n  HostName 198.18.239.2\n  {line}\n");
    let cases: Vec<(Option<String>, Vec<String>)> = vec![
        (None, vec![format!("--ssh-config {cfg}: no such file")]),
        (
            Some(h1("ProxyCommand nc %h %p")),
            vec![at3.clone(), "proxycommand \"nc %h %p\"".into()],
        ),
        (Some(match_exec), vec![at3.clone(), "Match exec".into()]),
        // a keyword OpenSSH itself rejects: its words
        (
            Some(h1("NoSuchKeyword yes")),
            vec!["OpenSSH rejects".into(), "line 3".into()],
        ),
        // a user certificate would change as whom kwinctl logs in
        (
            Some(h1("CertificateFile ~/.ssh/id-cert.pub")),
            vec![at3.clone(), "certificatefile".into()],
        ),
    ];
    for (config, want) in cases {
        let o = plan_with(d.path(), config.as_deref());
        let t = common::text(&o);
        assert_eq!(o.status.code(), Some(2), "{t}");
        for w in want {
            assert!(t.contains(&w), "{w:?} not in {t}");
        }
    }
    assert!(!marker.exists(), "Match exec ran");
}

/// `AddressFamily` decides which of a host's addresses OpenSSH tries:
/// kwinctl tries the same ones (an IPv4 address under `inet6`: none, said
/// before any packet is sent); fbe0578 ignored it and connected over IPv4.
#[test]
fn address_family_is_honoured() {
    let d = tempfile::tempdir().unwrap();
    let cfg = "Host h1\n  HostName 198.18.239.2\n  AddressFamily inet6\n";
    let e = endpoints(d.path(), cfg, &[("h1", "198.18.239.2")]).unwrap();
    assert_eq!(ssh_g(d.path(), "h1", "addressfamily"), "inet6");
    assert_eq!(e[0].family, kwinctl::transport::route::Family::Inet6);
    let o = plan_with(d.path(), Some(cfg));
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("cannot connect to 198.18.239.2:22: it has no inet6 address (ssh config AddressFamily inet6)"),
        "{t}"
    );
}

/// Everything `ssh -G` says for `name`, read as kwinctl has OpenSSH read the
/// config (kwinctl's default user, root, after the operator's files).
fn ssh_g_all(dir: &Path, name: &str) -> std::collections::HashMap<String, String> {
    let wrapper = dir.join("wrapper");
    common::write(
        &wrapper,
        &format!(
            "Include \"{}\"\nHost *\n  User root\n",
            dir.join("config").display()
        ),
    );
    let out = Command::new("ssh")
        .args(["-G", "-F"])
        .arg(&wrapper)
        .arg(name)
        .stdin(Stdio::null())
        .output()
        .expect("the OpenSSH client (ssh) is needed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = std::collections::HashMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, v)) = l.split_once(' ') {
            m.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    m
}

/// `~/x` as OpenSSH expands it for the current user.
fn tilde(p: &str) -> std::path::PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => kwinctl::transport::sshconf::LocalUser::current()
            .home
            .join(rest),
        None => p.into(),
    }
}

/// The corpus: configs operators write (and the ways OpenSSH reads them
/// that a hand-written reader gets wrong), each with the inventory hosts
/// resolved through it and where it goes (`user@host:port via hops`). For
/// every host, every setting kwinctl connects by is also compared with what
/// `ssh -G` prints for the same name.
/// (what it shows, the config, inventory hosts (name, address), where each
/// goes).
type Case = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const CORPUS: &[Case] = &[
    (
        "Match before Host (operator probe, gap 1); Host patterns",
        "Match host some-other-host\n  HostName 198.18.1.5\n  User nobody\n\
         Host node-a\n  HostName 198.18.1.2\nHost node-*\n  User ops\n  Port 2200\n",
        &[("node-a", "198.18.1.2")],
        &["ops@198.18.1.2:2200"],
    ),
    (
        "first value wins: Host * before the host's own block",
        "Host *\n  User first\nHost h1\n  HostName 198.18.1.2\n  User second\n  Port 2201\n",
        &[("h1", "198.18.1.2")],
        &["first@198.18.1.2:2201"],
    ),
    (
        "address patterns, negation, ? wildcard, pattern lists",
        "Host 198.18.1.* !198.18.1.3\n  User ops\nHost 198.18.1.? 198.18.2.2\n  Port 2202\n",
        &[
            ("a", "198.18.1.2"),
            ("b", "198.18.1.3"),
            ("c", "198.18.2.2"),
            ("d", "198.18.1.20"),
        ],
        &[
            "ops@198.18.1.2:2202",
            "root@198.18.1.3:2202",
            "root@198.18.2.2:2202",
            "ops@198.18.1.20:22",
        ],
    ),
    (
        "Match originalhost / host / all, negated Match (`host` is still web2 there: its HostName comes later)",
        "Match originalhost web* !host 198.18.9.*\n  Port 2203\nHost web1\n  HostName 198.18.1.2\n\
         Host web2\n  HostName 198.18.9.2\nMatch all\n  ConnectTimeout 7\n",
        &[("web1", "198.18.1.2"), ("web2", "198.18.9.2")],
        &["root@198.18.1.2:2203", "root@198.18.9.2:2203"],
    ),
    (
        "% tokens in HostName, UserKnownHostsFile, IdentityFile",
        "Host h1\n  HostName %h.example.test\n  HostKeyAlias alias-%n\n\
         Host *\n  UserKnownHostsFile /kh/%h-%p-%r ~/.ssh/kh2\n  IdentityFile ~/.ssh/plain\n",
        &[("h1", "198.18.1.2")],
        &["root@h1.example.test:22"],
    ),
    (
        "keyword syntax: = separators, quotes, case, comments",
        "# a comment\nhOsT h1\n  HOSTNAME=198.18.1.2\n  IdentityFile \"/keys/a b\"\n  \
         user = ops # not a comment to ssh? \n",
        &[("h1", "198.18.1.2")],
        &["ops@198.18.1.2:22"],
    ),
    (
        "key and host-key settings",
        "Host h1\n  HostName 198.18.1.2\n  IdentitiesOnly yes\n  IdentityFile /keys/one.pub\n  \
         StrictHostKeyChecking accept-new\n  GlobalKnownHostsFile /etc/kh-global\n  \
         AddressFamily inet\n  HashKnownHosts yes\n",
        &[("h1", "198.18.1.2")],
        &["root@198.18.1.2:22"],
    ),
    (
        "ProxyJump chains with user@host:port",
        "Host edge\n  HostName 198.18.1.2\n  User jumper\nHost h1\n  HostName 198.18.201.2\n  \
         ProxyJump edge,ops@198.18.200.2:2222\n",
        &[("h1", "198.18.201.2")],
        &["root@198.18.201.2:22 via jumper@198.18.1.2:22 -> ops@198.18.200.2:2222"],
    ),
];

#[test]
fn corpus_resolves_as_ssh_g_says() {
    for (what, config, hosts, want) in CORPUS {
        let d = tempfile::tempdir().unwrap();
        let es = match endpoints(d.path(), config, hosts) {
            Ok(es) => es,
            Err(e) => panic!("{what}: {e}"),
        };
        let got: Vec<String> = es.iter().map(|e| e.describe()).collect();
        assert_eq!(&got, want, "{what}");
        for e in &es {
            let g = ssh_g_all(d.path(), &e.name);
            let ctx = format!("{what}: {} ({e:?})", e.name);
            assert_eq!(e.host, g["hostname"], "{ctx}");
            assert_eq!(e.port.to_string(), g["port"], "{ctx}");
            assert_eq!(e.user, g["user"], "{ctx}");
            let ids: Vec<_> = String::from_utf8_lossy(
                &Command::new("ssh")
                    .args(["-G", "-F"])
                    .arg(d.path().join("wrapper"))
                    .arg(&e.name)
                    .output()
                    .unwrap()
                    .stdout,
            )
            .lines()
            .filter_map(|l| l.strip_prefix("identityfile "))
            .map(tilde)
            .collect();
            if ids.iter().all(|i| !i.to_string_lossy().contains('%')) {
                assert_eq!(e.identities, ids, "{ctx}");
            }
            let ukh: Vec<_> = g["userknownhostsfile"].split(' ').map(tilde).collect();
            assert_eq!(e.user_known_hosts, ukh, "{ctx}");
            let gkh: Vec<_> = g["globalknownhostsfile"].split(' ').map(tilde).collect();
            assert_eq!(e.global_known_hosts, gkh, "{ctx}");
            assert_eq!(
                e.host_key_alias.as_deref(),
                g.get("hostkeyalias").map(String::as_str),
                "{ctx}"
            );
            let strict = format!("{:?}", e.strict).to_ascii_lowercase();
            let want = match g["stricthostkeychecking"].as_str() {
                "accept-new" => "acceptnew",
                "false" | "no" | "off" => "no",
                _ => "yes",
            };
            assert_eq!(strict, want, "{ctx}");
            assert_eq!(e.identities_only, g["identitiesonly"] == "yes", "{ctx}");
            assert_eq!(e.hash_known_hosts, g["hashknownhosts"] == "yes", "{ctx}");
            assert_eq!(e.family.name(), g["addressfamily"], "{ctx}");
            let timeout = e.connect_timeout.map(|t| t.as_secs().to_string());
            assert_eq!(
                timeout.as_deref().unwrap_or("none"),
                g["connecttimeout"],
                "{ctx}"
            );
            // each hop is what ssh -G says for that hop's name, in order
            let jumps = g.get("proxyjump").map(String::as_str).unwrap_or("none");
            let hops = e.hops();
            if jumps == "none" {
                assert!(hops.is_empty(), "{ctx}");
            }
            for (hop, spec) in hops.iter().zip(jumps.split(',')) {
                let hg = ssh_g_all(d.path(), &hop.name);
                let (user, rest) = spec.split_once('@').unwrap_or(("", spec));
                let port = rest.split_once(':').map(|(_, p)| p);
                assert_eq!(hop.host, hg["hostname"], "{ctx}: hop {spec}");
                assert_eq!(
                    hop.user,
                    if user.is_empty() { &hg["user"] } else { user },
                    "{ctx}: hop {spec}"
                );
                assert_eq!(
                    hop.port.to_string(),
                    port.unwrap_or(&hg["port"]),
                    "{ctx}: hop {spec}"
                );
            }
            assert_eq!(
                hops.len(),
                if jumps == "none" {
                    0
                } else {
                    jumps.split(',').count()
                },
                "{ctx}"
            );
        }
    }
}

/// A config file but no OpenSSH client to read it: exit 2 saying so (and
/// how to go on without a config), not a guess at what the file means.
#[test]
fn a_config_without_an_ssh_binary_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let inv = d.path().join("inv.yaml");
    common::write(
        &inv,
        &format!("{CLUSTER}hosts:\n  - name: h1\n    os: linux\n    address: 198.18.239.2\n"),
    );
    let cfg = d.path().join("config");
    common::write(&cfg, "Host h1\n  HostName 198.18.239.2\n");
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "plan",
        "-i",
        inv.to_str().unwrap(),
        "--timeout",
        "1",
        "--retries",
        "0",
    ])
    .args(["--ssh-config", cfg.to_str().unwrap()])
    .env("KWINCTL_SSH_BINARY", d.path().join("no-ssh-here"))
    .env_remove("SSH_AUTH_SOCK");
    let o = common::run_bounded(cmd, std::time::Duration::from_secs(60));
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("no `ssh` binary") && t.contains("--ssh-config none"),
        "{t}"
    );
}
