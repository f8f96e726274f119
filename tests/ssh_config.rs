//! A corpus of ssh_config files, each resolved by kwinctl and compared with
//! what `ssh -G` itself says for the same name (OpenSSH is the reference):
//! Match before Host, Include with a glob, patterns on addresses, negation,
//! `%h` tokens, ProxyJump chains; and the configs kwinctl must refuse
//! (Match exec, ProxyCommand, a name given settings its address does not
//! get), each naming the file and line; and the same refusals from the
//! command line (exit 2, nothing contacted). Needs the OpenSSH client, not
//! root.

mod common;

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

/// `ssh -G -F config name` as OpenSSH prints it, one keyword.
fn ssh_g(dir: &Path, name: &str, keyword: &str) -> String {
    let out = Command::new("ssh")
        .args(["-G", "-F"])
        .arg(dir.join("config"))
        .arg(name)
        .stdin(Stdio::null())
        .output()
        .expect("the OpenSSH client (ssh) is needed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{keyword} ")).map(str::to_string))
        .unwrap_or_default()
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

    let o = plan_with(d.path(), None);
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("--ssh-config {cfg}: no such file")),
        "{t}"
    );

    let o = plan_with(
        d.path(),
        Some("Host h1\n  HostName 198.18.239.2\n  ProxyCommand nc %h %p\n"),
    );
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{cfg}:3")) && t.contains("proxycommand \"nc %h %p\""),
        "{t}"
    );

    let marker = d.path().join("ran");
    let o = plan_with(
        d.path(),
        Some(&format!(
            "Host *\n  User ops\nMatch exec \"touch {}\"\n  User x\n",
            marker.display()
        )),
    );
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{cfg}:3")) && t.contains("Match exec"),
        "{t}"
    );
    assert!(!marker.exists(), "Match exec ran");

    // a keyword OpenSSH itself rejects: its words, and exit 2
    let o = plan_with(
        d.path(),
        Some("Host h1\n  HostName 198.18.239.2\n  NoSuchKeyword yes\n"),
    );
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("OpenSSH rejects") && t.contains("line 3"), "{t}");

    // a user certificate would change as whom kwinctl logs in
    let o = plan_with(
        d.path(),
        Some("Host h1\n  HostName 198.18.239.2\n  CertificateFile ~/.ssh/id-cert.pub\n"),
    );
    let t = common::text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("{cfg}:3")) && t.contains("certificatefile"),
        "{t}"
    );
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
