//! Ansible inventories of the lab's hosts, converted by `kwinctl import
//! ansible` and then used for `up`: an INI one (Linux hosts over SSH with
//! the lab's key, the simulated Windows host over WinRM with its password in
//! `ansible_password`, which kwinctl never copies) brings the lab up; a YAML
//! one of the same hosts, imported beside it, finds nothing to change.
//! Groups from Ansible are `--limit` targets.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::lab::{Lab, require_root};
use common::{kwinctl_env, summary, text, write};

/// The imported inventory with what the operator fills in: the lab's
/// `cluster:` section, and the Windows binaries for the built-in `windows`
/// group (both from the lab's own inventory).
pub(crate) fn complete(lab: &Lab, imported: &Path) {
    let lab_inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let cluster = lab_inv.split("defaults:").next().unwrap();
    let binaries: Vec<&str> = lab_inv
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("kubelet:") || l.trim_start().starts_with("kube-proxy:")
        })
        .take(2)
        .collect();
    let s = std::fs::read_to_string(imported).unwrap();
    let start = s.find("\ncluster:").unwrap() + 1;
    let end = s.find("\ndefaults:").unwrap() + 1;
    let mut out = format!("{}{}{}", &s[..start], cluster, &s[end..]);
    // the lab's own known_hosts file (Ansible's inventory has no such variable)
    let ssh = out.find("\ndefaults:").unwrap();
    let ssh = ssh + out[ssh..].find("\n  ssh:\n").unwrap() + "\n  ssh:\n".len();
    out.insert_str(
        ssh,
        &format!(
            "    known_hosts: {}\n",
            lab.dir().join("known_hosts").display()
        ),
    );
    let win = out.find("  windows:  # Ansible group windows").unwrap();
    let eol = win + out[win..].find('\n').unwrap() + 1;
    out.insert_str(
        eol,
        &format!("    windows:\n      binaries:\n{}\n", binaries.join("\n")),
    );
    assert!(!out.contains(": FILL-IN"), "{out}");
    write(imported, &out);
}

/// `kwinctl import ansible FROM -o DIR/FOLDER/inventory.yaml` (with `env`),
/// which must succeed, then [`complete`]d: the inventory's path, and the
/// import's output.
pub(crate) fn import_completed(
    lab: &Lab,
    from: &Path,
    folder: &str,
    env: &[(&str, &str)],
) -> (PathBuf, Output) {
    let to = lab.dir().join(folder).join("inventory.yaml");
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let o = kwinctl_env(
        &[
            "import",
            "ansible",
            from.to_str().unwrap(),
            "-o",
            to.to_str().unwrap(),
        ],
        env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    complete(lab, &to);
    (to, o)
}

#[test]
fn ansible_ini_and_yaml_inventories_of_the_lab_are_imported_and_brought_up() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let d = lab.dir();
    let key = d.join("id_ed25519");
    let password = lab.winrm_password();
    // the INI inventory an Ansible user of this lab would have
    let ini = d.join("ansible-hosts.ini");
    write(
        &ini,
        &format!(
            "[kube_control_plane]\nh1 ansible_host={}\n\n[workers]\nh2 ansible_host={}\n\n\
             [windows]\nwin1 ansible_host={}\n\n[all:vars]\nansible_user=root\n\
             ansible_ssh_private_key_file={}\n\n[windows:vars]\nansible_connection=winrm\n\
             ansible_winrm_scheme=http\nansible_port=5985\nansible_winrm_transport=ntlm\n\
             ansible_user=Administrator\nansible_password={password}\n",
            lab.ip("h1"),
            lab.ip("h2"),
            lab.ip("win1"),
            key.display()
        ),
    );
    let env = [("KWINCTL_WINRM_PASSWORD_WINDOWS", password.as_str())];

    let (from_ini, o) = import_completed(&lab, &ini, "from-ini", &env);
    let written = std::fs::read_to_string(&from_ini).unwrap();
    assert!(!written.contains(&password) && !text(&o).contains(&password));
    let i = from_ini.to_str().unwrap();
    let o = kwinctl_env(&["up", "-i", i, "--output", "json"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["ok"], true, "{s}");
    assert!(s["changed"].as_u64().unwrap() > 0, "{s}");
    // h2 routes h1's and win1's pod CIDRs through them
    let routes = lab.routes("h2");
    for peer in ["h1", "win1"] {
        assert!(
            routes.contains(&format!("via {}", lab.ip(peer))),
            "{peer}: {routes}"
        );
    }

    // the YAML inventory of the same hosts, imported elsewhere: the nodes
    // already hold the cluster, so `up` changes nothing (NTLM named: over
    // http Ansible's default transport is Basic in clear, which the import
    // refuses)
    let yaml = d.join("ansible-hosts.yaml");
    write(
        &yaml,
        &format!(
            "all:\n  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: {}\n  children:\n    \
             kube_control_plane:\n      hosts:\n        h1: {{ ansible_host: {} }}\n    workers:\n      \
             hosts:\n        h2: {{ ansible_host: {} }}\n    windows:\n      vars:\n        \
             ansible_connection: winrm\n        ansible_winrm_scheme: http\n        ansible_port: 5985\n        ansible_winrm_transport: ntlm\n        ansible_user: Administrator\n        \
             ansible_password: \"{password}\"\n      hosts:\n        win1: {{ ansible_host: {} }}\n",
            key.display(),
            lab.ip("h1"),
            lab.ip("h2"),
            lab.ip("win1")
        ),
    );
    let (from_yaml, _) = import_completed(&lab, &yaml, "from-yaml", &env);
    let y = from_yaml.to_str().unwrap();
    let o = kwinctl_env(&["up", "-i", y, "--output", "json"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(
        (s["ok"].clone(), s["changed"].clone()),
        (true.into(), 0.into()),
        "{s}"
    );
    // an Ansible group as --limit: only the Windows host is reported
    let o = kwinctl_env(
        &["verify", "-i", y, "--limit", "windows", "--output", "json"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let hosts: Vec<&str> = s["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["win1"], "{s}");
}

/// Where an Ansible inventory said `cert_validation=ignore`, the imported
/// one has no pin, and kwinctl's checked connection fails: the error names
/// the certificate the listener presented (its SHA-256, the one winsim
/// made) and the exact line to add; with that line the connection passes
/// TLS.
#[test]
fn a_winrm_tls_error_prints_the_presented_certificate_and_the_line_to_add() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(1, 1);
    let pw = lab.dir().join("winrm-password");
    let set = |extra: &str| {
        let text = std::fs::read_to_string(lab.inventory()).unwrap();
        let mut out = String::new();
        let mut in_host = false;
        for line in text.lines() {
            if line.trim_start().starts_with("- name:") {
                in_host = line.trim_start() == "- name: win1";
            }
            if in_host && line.trim_start().starts_with("winrm:") {
                out += &format!(
                    "    winrm: {{ port: 5986, tls: true, auth: ntlm, password_file: {}{extra} }}\n",
                    pw.display()
                );
            } else {
                out += line;
                out.push('\n');
            }
        }
        assert_ne!(out, text, "no winrm line for win1");
        write(lab.inventory(), &out);
    };
    set("");
    let i = lab.inv();
    let verify = || {
        let o = kwinctl_env(
            &[
                "verify",
                "-i",
                &i,
                "--limit",
                "win1",
                "--output",
                "json",
                "--retries",
                "0",
            ],
            &[],
        );
        let s = summary(&o);
        let h = s["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["host"] == "win1")
            .cloned()
            .unwrap_or_else(|| panic!("{}", text(&o)));
        h["error"].as_str().unwrap_or_default().to_string()
    };
    let e = verify();
    let want: String = lab
        .cert_sha256("win1")
        .trim()
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_lowercase();
    assert!(e.contains("TLS"), "{e}");
    assert!(
        e.contains(&format!("presented a certificate with SHA-256 {want}")),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "add `cert_sha256: \"{want}\"` under winrm: of host win1"
        )),
        "{e}"
    );
    // the line the error gave, added: TLS passes
    set(&format!(", cert_sha256: \"{want}\""));
    let e = verify();
    assert!(!e.contains("TLS") && !e.contains("certificate"), "{e}");
}
