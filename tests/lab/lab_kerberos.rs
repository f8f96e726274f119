//! WinRM with Kerberos end to end: the lab's MIT KDC (lab/kdc.sh), a
//! simulated Windows host that accepts Kerberos with its keytab and seals
//! with that context, and refuses NTLM when its policy says so; kwinctl
//! with the realm's krb5.conf and a credential cache of the test's own.
//! The failures kwinctl explains are in lab_kerberos_errors.rs.

use crate::common;
use crate::lab_trace::{WINRM_MAX, assert_one_winrm_connection, traced_env};
use crate::lab_windows::{set_win_state, set_winrm};

use common::kdc::Kdc;
use common::lab::{Lab, require_root};
use common::{host, kwinctl_env, summary, text};

pub(crate) fn run(kdc: &Kdc, args: &[&str]) -> std::process::Output {
    let env = kdc.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    kwinctl_env(args, &env)
}

/// win1 reached over Kerberos, sealed over HTTP.
fn kerberos_over_http(lab: &Lab, kdc: &Kdc) {
    set_winrm(
        lab,
        "win1",
        &format!(
            "{{ port: 5985, tls: false, auth: kerberos, user: {} }}",
            kdc.user
        ),
    );
}

#[test]
fn up_and_verify_over_kerberos_on_a_host_that_refuses_ntlm() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    let kdc = lab.kdc();
    let i = lab.inv();
    set_win_state(&lab, "win1", "refuse_ntlm", serde_json::json!(true));
    // NTLM: refused by the host, and said so (no password was tried)
    let o = run(&kdc, &["plan", "-i", &i]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("it refuses NTLM") && text(&o).contains("winrm.auth: kerberos"),
        "{}",
        text(&o)
    );

    kerberos_over_http(&lab, &kdc);
    kdc.kinit("10h");
    let o = run(&kdc, &["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "win1")["status"], "changed", "{s}");
    let o = run(&kdc, &["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // a rerun converges with nothing to do
    let o = run(&kdc, &["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let log = std::fs::read_to_string(lab.dir().join("hosts/win1/winsim.log")).unwrap();
    assert!(
        log.contains(&format!("kerberos: accepted {}", kdc.user)),
        "{log}"
    );

    // over HTTPS (the listener's certificate pinned), and with the
    // operator's keytab instead of the credential cache
    set_winrm(
        &lab,
        "win1",
        &format!(
            "{{ port: 5986, tls: true, cert_sha256: \"{}\", auth: kerberos, user: {}, keytab: {} }}",
            lab.cert_sha256("win1"),
            kdc.user,
            kdc.keytab().display()
        ),
    );
    let no_cache = [
        ("KRB5_CONFIG", kdc.env()[0].1.clone()),
        ("KRB5CCNAME", "FILE:/nonexistent/kwinctl-ccache".to_string()),
    ];
    let env: Vec<(&str, &str)> = no_cache.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = kwinctl_env(&["verify", "-i", &i], &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // a service principal named after the host's DNS name (winrm.spn),
    // while the connection goes to the inventory's address
    let spn = dns_spn(&lab, &kdc);
    set_winrm(
        &lab,
        "win1",
        &format!(
            "{{ port: 5985, tls: false, auth: kerberos, user: {}, spn: HTTP/win1.lab.invalid }}",
            kdc.user
        ),
    );
    let o = run(&kdc, &["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = std::process::Command::new("klist")
        .envs(kdc.env())
        .output()
        .expect("klist");
    let tickets = String::from_utf8_lossy(&o.stdout);
    assert!(tickets.contains(&spn), "{tickets}");
}

/// The principal HTTP/win1.lab.invalid, a name only the KDC and win1's
/// keytab know (no DNS has it).
fn dns_spn(lab: &Lab, kdc: &Kdc) -> String {
    let spn = format!("HTTP/win1.lab.invalid@{}", kdc.realm);
    lab.kadmin(&format!("addprinc -randkey {spn}"));
    let keytab = lab.dir().join("hosts/win1/http.keytab");
    lab.kadmin(&format!("ktadd -k {} {spn}", keytab.display()));
    spn
}

/// An Ansible inventory whose Windows host uses Kerberos (a ticket from
/// kinit: manual kinit mode, and the host's DNS name for the service
/// principal) imports into one that brings the lab up over Kerberos.
#[test]
fn an_ansible_kerberos_inventory_imports_and_brings_the_lab_up() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    let kdc = lab.kdc();
    dns_spn(&lab, &kdc);
    let d = lab.dir();
    let ini = d.join("ansible-hosts.ini");
    common::write(
        &ini,
        &format!(
            "[kube_control_plane]\nh1 ansible_host={}\n\n[windows]\nwin1 ansible_host={} \
             ansible_winrm_kerberos_hostname_override=win1.lab.invalid\n\n[all:vars]\nansible_user=root\n\
             ansible_ssh_private_key_file={}\n\n[windows:vars]\nansible_connection=winrm\n\
             ansible_winrm_scheme=http\nansible_port=5985\nansible_winrm_transport=kerberos\n\
             ansible_winrm_kinit_mode=manual\nansible_user={}\n",
            lab.ip("h1"),
            lab.ip("win1"),
            d.join("id_ed25519").display(),
            kdc.user
        ),
    );
    let env = kdc.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (imported, _) = crate::lab_import::import_completed(&lab, &ini, "from-ansible", &env);
    // NTLM refused: only Kerberos gets in
    set_win_state(&lab, "win1", "refuse_ntlm", serde_json::json!(true));
    kdc.kinit("10h");
    let i = imported.to_str().unwrap();
    let o = run(&kdc, &["up", "-i", i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        host(&summary(&o), "win1")["status"],
        "changed",
        "{}",
        text(&o)
    );
    let o = run(&kdc, &["verify", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A lab with one simulated Windows host reached over Kerberos.
pub(crate) fn kerberos_lab() -> (Lab, Kdc) {
    let lab = Lab::up_mixed(0, 1);
    let kdc = lab.kdc();
    kerberos_over_http(&lab, &kdc);
    (lab, kdc)
}

/// Kerberos through a 300 ms link: each step takes no more exchanges than
/// the trace says, one more than NTLM's budget at most, all on one TCP
/// connection. The shell's Create pays for opening it: TCP and the AP-REQ
/// on an empty request (NTLM: TCP, then its negotiate and authenticate).
#[test]
fn kerberos_through_a_slow_link_each_request_costs_what_the_trace_says() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("10h");
    let (steps, out) = traced_env(&lab, "win1", "verify", &kdc.env());
    let n: u64 = steps.iter().map(|s| s.2).sum();
    assert!(n <= WINRM_MAX + 1, "kerberos verify: {n} exchanges: {out}");
    assert!(
        out.contains("shell Create answered: 2 of them opening the connection [3 exchanges]"),
        "{out}"
    );
    assert_one_winrm_connection(&lab, "win1");
}

/// One inventory, three ways in: the Linux host over SSH, win1 over NTLM,
/// win2 over Kerberos (refusing NTLM).
#[test]
fn a_mixed_cluster_uses_ssh_ntlm_and_kerberos_side_by_side() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 2);
    let kdc = lab.kdc();
    set_winrm(
        &lab,
        "win2",
        &format!(
            "{{ port: 5985, tls: false, auth: kerberos, user: {} }}",
            kdc.user
        ),
    );
    set_win_state(&lab, "win2", "refuse_ntlm", serde_json::json!(true));
    kdc.kinit("10h");
    let i = lab.inv();
    let o = run(&kdc, &["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in ["h1", "win1", "win2"] {
        assert_eq!(host(&s, h)["status"], "changed", "{h}: {s}");
    }
    let o = run(&kdc, &["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let log =
        |h: &str| std::fs::read_to_string(lab.dir().join(format!("hosts/{h}/winsim.log"))).unwrap();
    assert!(
        !log("win1").contains("kerberos: accepted"),
        "win1 used NTLM"
    );
    assert!(
        log("win2").contains("kerberos: accepted"),
        "{}",
        log("win2")
    );
}

/// Kerberos to a host reached only through an SSH bastion: the WinRM
/// tunnel carries the AP-REQ and the sealed requests, with the service
/// principal of the address and with one named by winrm.spn.
#[test]
fn kerberos_through_a_bastion() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let w = lab.hidden("w1", "h1", "windows");
    let kdc = lab.kdc();
    let keytab = lab.dir().join("hosts/w1/http.keytab");
    for p in [format!("HTTP/{}", w.ip), "HTTP/w1.lab.invalid".to_string()] {
        lab.kadmin(&format!("addprinc -randkey {p}@{}", kdc.realm));
        lab.kadmin(&format!("ktadd -k {} {p}@{}", keytab.display(), kdc.realm));
    }
    kdc.kinit("10h");
    let base = std::fs::read_to_string(lab.inventory()).unwrap();
    let (head, hosts) = base.split_once("hosts:\n").unwrap();
    let bastion = format!(
        "bastion: {{ address: {}, identity: {}, known_hosts: {} }}",
        lab.ip("h1"),
        lab.dir().join("id_ed25519").display(),
        lab.dir().join("known_hosts").display()
    );
    for spn in ["", ", spn: HTTP/w1.lab.invalid"] {
        let inv = lab.dir().join("kerberos-bastion.yaml");
        common::write(
            &inv,
            &format!(
                "{head}hosts:\n{hosts}  - name: w1\n    os: windows\n    address: {}\n    \
                 winrm: {{ port: 5985, tls: false, auth: kerberos, user: {}{spn}, {bastion} }}\n",
                w.ip, kdc.user
            ),
        );
        let o = run(
            &kdc,
            &["verify", "-i", inv.to_str().unwrap(), "--limit", "w1"],
        );
        // reached and authenticated: the host's probe ran, and found the
        // (never installed) kubelet missing
        let out = text(&o);
        assert!(
            out.contains(r"C:\k\kubelet.exe is missing") && !out.contains("Kerberos"),
            "{spn}: {out}"
        );
    }
    let log = std::fs::read_to_string(lab.dir().join("hosts/w1/winsim.log")).unwrap();
    assert_eq!(log.matches("kerberos: accepted").count(), 2, "{log}");
}

/// `lab.sh down` ends the KDC too (also one restarted under faketime) and
/// removes its namespace.
#[test]
fn lab_down_ends_the_kdc_and_its_namespace() {
    if !require_root() {
        return;
    }
    let (lab, _kdc) = kerberos_lab();
    lab.kdc_clock("+2h");
    let dir = lab.dir().join("kdc").display().to_string();
    let kdcs = || {
        let o = std::process::Command::new("pgrep")
            .args(["-f", &format!("^(faketime .*)?krb5kdc -n -P {dir}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    // faketime and the KDC it started
    assert_eq!(kdcs(), 2, "one KDC runs, under faketime");
    let id = std::fs::read_to_string(lab.dir().join("lab.env")).unwrap();
    let id = id
        .lines()
        .find_map(|l| l.strip_prefix("LAB_ID="))
        .unwrap()
        .to_string();
    let o = lab.down();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(kdcs(), 0, "the KDC outlives lab.sh down");
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let ns = format!("kwl{id}k0");
    assert!(
        !String::from_utf8_lossy(&list.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ns.as_str())),
        "{ns} is still there"
    );
}

/// A SPNEGO client (pyspnego's `negotiate`, as pywinrm and pypsrp send
/// it), not only winrm-rs's raw Kerberos token: the simulated host takes
/// it under `Negotiate`, as Windows does, and its answer completes the
/// client's context.
const SPNEGO_CLIENT: &str = r#"
import base64, http.client, sys, spnego
ip = sys.argv[1]
c = spnego.client(hostname=ip, service="HTTP", protocol="negotiate")
tok = c.step()
assert tok[:1] == b"\x60", "not an initial SPNEGO token"
h = http.client.HTTPConnection(ip, 5985, timeout=20)
h.request("POST", "/wsman", body=b"", headers={
    "Authorization": "Negotiate " + base64.b64encode(tok).decode(),
    "Content-Type": "application/soap+xml;charset=UTF-8"})
r = h.getresponse()
r.read()
c.step(base64.b64decode(r.getheader("WWW-Authenticate").split(" ", 1)[1]))
print(r.status, c.complete)
"#;

#[test]
fn winsim_takes_a_spnego_token_as_windows_does() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("10h");
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/winsim/.venv/bin/python");
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-c", SPNEGO_CLIENT, &lab.ip("win1")])
        .envs(kdc.env());
    let o = common::run_bounded(cmd, std::time::Duration::from_secs(60));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "200 True",
        "{}",
        text(&o)
    );
    let log = std::fs::read_to_string(lab.dir().join("hosts/win1/winsim.log")).unwrap();
    assert!(
        log.contains(&format!("kerberos: accepted {}", kdc.user)),
        "{log}"
    );
}

/// A new certificate and key for win1's HTTPS listener, for `name`, signed
/// by a new CA written to `ca` (winsim's listener takes it for the next
/// connection, as a Windows listener given another certificate).
fn new_listener_certificate(lab: &Lab, name: &str, ca: &std::path::Path) {
    let root = env!("CARGO_MANIFEST_DIR");
    let hd = lab.dir().join("hosts/win1");
    let o = std::process::Command::new(format!("{root}/winsim/.venv/bin/python"))
        .arg(format!("{root}/winsim/winsim.py"))
        .args(["gencert", "--cn", name, "--cert"])
        .arg(hd.join("cert.pem"))
        .arg("--key")
        .arg(hd.join("key.pem"))
        .arg("--ca")
        .arg(ca)
        .output()
        .expect("winsim gencert");
    assert!(o.status.success(), "{}", text(&o));
}

/// What docs/windows-kerberos.md recommends for a domain: HTTPS with a
/// certificate for the host's DNS name from a CA the operator trusts
/// (winrm.ca_file, no pin), and winrm.spn naming that DNS name. The name
/// in the URL is what the certificate is checked against, while the
/// connection goes to the inventory's address; a certificate for another
/// name is refused, naming the certificate, before any ticket reaches the
/// host. (`plan`: the lab has no Linux control plane to take the lock.)
#[test]
fn kerberos_over_https_checks_the_certificate_against_the_spn_s_name() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("10h");
    dns_spn(&lab, &kdc);
    set_win_state(&lab, "win1", "refuse_ntlm", serde_json::json!(true));
    let ca = lab.dir().join("hosts/win1/domain-ca.pem");
    new_listener_certificate(&lab, "win1.lab.invalid", &ca);
    set_winrm(
        &lab,
        "win1",
        &format!(
            "{{ port: 5986, tls: true, ca_file: {}, auth: kerberos, user: {}, spn: HTTP/win1.lab.invalid }}",
            ca.display(),
            kdc.user
        ),
    );
    let i = lab.inv();
    let o = run(&kdc, &["plan", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let log = || std::fs::read_to_string(lab.dir().join("hosts/win1/winsim.log")).unwrap();
    let accepted = log().matches("kerberos: accepted").count();
    assert!(accepted > 0, "{}", log());

    // the listener now presents a certificate for another name
    new_listener_certificate(&lab, "other.lab.invalid", &ca);
    let o = run(&kdc, &["plan", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = host(&summary(&o), "win1")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        e.contains("the listener's certificate does not name win1.lab.invalid (winrm.spn's name)"),
        "{e}"
    );
    // a refused certificate is not retried as a transient failure (-v
    // shows the connection's steps, a retry among them)
    let o = run(&kdc, &["plan", "-i", &i, "-v"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("certificate does not name")
            && !text(&o).contains("connect failed, retrying"),
        "{}",
        text(&o)
    );
    assert_eq!(
        log().matches("kerberos: accepted").count(),
        accepted,
        "a ticket reached a host whose certificate was refused"
    );
}
