//! docs/first-cluster.md, step by step, on a lab: `init` with the lab's
//! addresses, fill in what it marks (the lab's downloads and their SHA-256,
//! the kubeconfig, each host's certificate pin, the SSH key), `check`,
//! `plan`, `up --reboot` (the Containers feature needs a restart), `verify`,
//! `graph`.

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl_env, summary, text};

/// The release and containerd the guide's example uses (a containerd
/// release containerd supports for it: RELEASES.md, k8s.yaml's table).
const K8S: &str = "1.34.2";

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn the_first_cluster_guide_works_on_the_lab() {
    if !require_root() {
        return;
    }
    // the containerd `init` writes for the release: the lab serves it too
    let o = common::kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "198.18.0.2",
        "--windows",
        "198.18.0.3",
        "--kubernetes-version",
        K8S,
    ]);
    let containerd = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("containerd_version: "))
        .expect("containerd_version")
        .trim_matches('"')
        .to_string();
    let lab = Lab::up_windows_builds_env(
        1,
        &["2022", "2022"],
        None,
        &[
            ("KWINCTL_LAB_K8S", K8S),
            ("KWINCTL_LAB_CONTAINERD", &containerd),
        ],
    );
    let dir = lab.dir();
    let inv = dir.join("cluster.yaml");
    let i = inv.to_str().unwrap();
    let env = [("KWINCTL_WINRM_PASSWORD", lab.winrm_password())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = |args: &[&str]| kwinctl_env(args, &env);

    // 1. init with the hosts' addresses
    let o = run(&[
        "init",
        "--offline",
        "--control-plane",
        &lab.ip("h1"),
        "--windows",
        &lab.ip("win1"),
        &lab.ip("win2"),
        "--kubernetes-version",
        K8S,
        "-o",
        i,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 2. check names what is left to fill in
    let o = run(&["check", "-i", i]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("cluster.kubeconfig is still FILL-IN"),
        "{}",
        text(&o)
    );

    // 3. fill it in: the lab's downloads (its own server), their SHA-256,
    // the kubeconfig, each Windows host's certificate pin, the SSH key
    let dl = dir.join("dl");
    let mut filled = String::new();
    for line in std::fs::read_to_string(&inv).unwrap().lines() {
        let t = line.trim_start();
        let bin = |name: &str, file: &std::path::Path, url: String| {
            let sha = sha256(&std::fs::read(file).unwrap_or_else(|e| panic!("{file:?}: {e}")));
            format!("      {name}: {{ url: \"{url}\", sha256: {sha} }}\n")
        };
        let line = if t.starts_with("kubeconfig: FILL-IN") {
            format!("  kubeconfig: {}\n", dir.join("kubeconfig").display())
        } else if t.starts_with("ssh: { user: root }") {
            format!(
                "  ssh: {{ user: root, identity: {}, known_hosts: {} }}\n",
                dir.join("id_ed25519").display(),
                dir.join("known_hosts").display()
            )
        } else if let Some(name) = ["kubelet", "kube-proxy", "kube-log-runner"]
            .into_iter()
            .find(|b| t.starts_with(&format!("{b}: {{")))
        {
            bin(
                name,
                &dl.join(format!("v{K8S}/{name}.exe")),
                format!("https://dl.lab.invalid/v{K8S}/{name}.exe"),
            )
        } else if t.starts_with("containerd: {") {
            let f = format!("containerd-{containerd}-windows-amd64.tar.gz");
            bin("containerd", &dl.join(&f), lab.download(&f).0)
        } else if t.starts_with("cni-plugins: {") {
            let f = "cni-plugins-windows-amd64-v1.6.2.tgz";
            bin("cni-plugins", &dl.join(f), lab.download(f).0)
        } else {
            format!("{line}\n")
        };
        filled.push_str(&line);
    }
    for w in ["win1", "win2"] {
        let at = filled.find(&format!("name: {w}\n")).unwrap();
        let pin = at + filled[at..].find("cert_sha256: FILL-IN").unwrap();
        filled.replace_range(
            pin..pin + "cert_sha256: FILL-IN".len(),
            &format!("cert_sha256: \"{}\"", lab.cert_sha256(w)),
        );
    }
    assert!(!filled.contains(": FILL-IN"), "{filled}");
    std::fs::write(&inv, &filled).unwrap();
    let o = run(&["check", "--strict", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 4. plan: everything to do, nothing changed
    let o = run(&["plan", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("would change "), "{}", text(&o));

    // 5. up, restarting the Windows hosts for the Containers feature
    let o = run(&["up", "--reboot", "-i", i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        summary(&o)["failed_hosts"],
        serde_json::json!([]),
        "{}",
        text(&o)
    );

    // 6. verify, and the picture coloured by it
    let o = run(&["verify", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["graph", "-i", i, "--format", "dot"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let d = String::from_utf8_lossy(&o.stdout);
    assert!(d.contains("the last verify ("), "{d}");
    assert!(
        !d.contains("#c62828") && !d.contains("#757575"),
        "all verified good:\n{d}"
    );
}
