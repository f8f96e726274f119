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

/// The guide's steps 1 to 5 on a lab (with a second Linux host as `lin1`
/// when `linux`): the lab, the filled-in inventory, the WinRM password.
fn guide_cluster(linux: bool) -> (Lab, std::path::PathBuf, String) {
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
        if linux { 2 } else { 1 },
        &["2022", "2022"],
        None,
        &[
            ("KWINCTL_LAB_K8S", K8S),
            ("KWINCTL_LAB_CONTAINERD", &containerd),
        ],
    );
    // the control plane's kubectl and kubeadm (the stand-ins): the nodes
    // join with their own identity through them (init's service_cidr's
    // DNS address)
    lab.install_kubectl("h1", "10.96.0.10", "cluster.local");
    let dir = lab.dir().to_path_buf();
    let inv = dir.join("cluster.yaml");
    let i = inv.to_str().unwrap().to_string();
    let i = i.as_str();
    let password = lab.winrm_password();
    let run = |args: &[&str]| kwinctl_env(args, &[("KWINCTL_WINRM_PASSWORD", &password)]);

    // 1. init with the hosts' addresses
    let h2 = if linux { lab.ip("h2") } else { String::new() };
    let mut args = vec!["init", "--offline", "--control-plane"];
    let (h1, w1, w2) = (lab.ip("h1"), lab.ip("win1"), lab.ip("win2"));
    args.push(&h1);
    if linux {
        args.extend(["--linux", h2.as_str()]);
    }
    args.extend([
        "--windows",
        w1.as_str(),
        w2.as_str(),
        "--kubernetes-version",
        K8S,
        "-o",
        i,
    ]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 2. check names what is left to fill in
    let o = run(&["check", "-i", i]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("winrm.cert_sha256 is still FILL-IN"),
        "{}",
        text(&o)
    );
    // no credential to fill in: the nodes join with their own
    assert!(!text(&o).contains("kubeconfig"), "{}", text(&o));

    // 3. fill it in: the lab's downloads (its own server), their SHA-256,
    // each Windows host's certificate pin, the SSH key
    let dl = dir.join("dl");
    let mut filled = String::new();
    for line in std::fs::read_to_string(&inv).unwrap().lines() {
        let t = line.trim_start();
        let bin = |name: &str, file: &std::path::Path, url: String| {
            let sha = sha256(&std::fs::read(file).unwrap_or_else(|e| panic!("{file:?}: {e}")));
            format!("      {name}: {{ url: \"{url}\", sha256: {sha} }}\n")
        };
        let line = if t.starts_with("ssh: { user: root }") {
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

    (lab, inv, password)
}

#[test]
fn the_first_cluster_guide_works_on_the_lab() {
    if !require_root() {
        return;
    }
    let (_lab, inv, password) = guide_cluster(false);
    let i = inv.to_str().unwrap();
    let run = |args: &[&str]| kwinctl_env(args, &[("KWINCTL_WINRM_PASSWORD", &password)]);

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

/// The inventory without host `name`'s entry (from its `- name:` line to
/// the next host's).
fn without_host(text: &str, name: &str) -> String {
    let at = text
        .find(&format!("  - name: {name}\n"))
        .unwrap_or_else(|| panic!("no host {name}:\n{text}"));
    let end = text[at + 1..]
        .find("  - name: ")
        .map(|e| at + 1 + e)
        .unwrap_or(text.len());
    format!("{}{}", &text[..at], &text[end..])
}

/// docs/first-cluster.md, "Later", "Remove a node", for a Linux and a
/// Windows node: delete it from the inventory, then `kwinctl reset
/// --limit NAME`. The Windows node is reached with the certificate pin its
/// entry had; each node is left with nothing of kwinctl's, no other node
/// routes its block, and no run says it still awaits a reset.
#[test]
fn removing_a_node_as_the_guide_says_works_for_linux_and_windows() {
    if !require_root() {
        return;
    }
    let (lab, inv, password) = guide_cluster(true);
    // the Windows nodes' boot-task loops put back every route their task
    // lists, each second here (`boot_loop_seconds`): a route removed while
    // the task still lists it comes back within a period or two
    const LOOP: f64 = 1.0;
    for h in ["win1", "win2"] {
        let mut st = lab.win_state_json(h);
        st["boot_loop_seconds"] = LOOP.into();
        common::write(&lab.win_state(h), &st.to_string());
    }
    // (the pass already planned keeps winsim's default 10 s period)
    std::thread::sleep(std::time::Duration::from_secs(11));
    let i = inv.to_str().unwrap();
    let run = |args: &[&str]| kwinctl_env(args, &[("KWINCTL_WINRM_PASSWORD", &password)]);
    let state = inv.with_file_name("cluster.kwinctl-state.json");
    let block = |name: &str| -> String {
        let st: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        st["pod_cidrs"][name]
            .as_str()
            .unwrap_or_else(|| panic!("{name} in {st}"))
            .to_string()
    };
    for (name, lab_host) in [("lin1", "h2"), ("win2", "win2")] {
        let b = block(name);
        let yaml = std::fs::read_to_string(&inv).unwrap();
        std::fs::write(&inv, without_host(&yaml, name)).unwrap();
        // plan --reset lists the other nodes' routes to it too
        let o = run(&[
            "plan", "--reset", "-i", i, "--limit", name, "--output", "json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let s = summary(&o);
        let cp = common::host(&s, "cp1");
        assert_eq!(cp["status"], "pending", "{s}");
        assert!(
            common::actions(cp, "planned")
                .iter()
                .any(|a| a.contains(&format!("route {b}"))),
            "{s}"
        );
        let o = run(&["reset", "-i", i, "--limit", name, "--yes"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("{name}: reset; its block is no longer reserved")),
            "{}",
            text(&o)
        );
        // nothing of kwinctl's on it
        if lab_host.starts_with('h') {
            let left = lab.exec(lab_host, "ls -A /etc/kwinctl; ip -4 route show proto 198");
            assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "", "{name}");
        } else {
            let d = lab.win_state_json(lab_host);
            assert!(d["pod_cidr"].is_null(), "{name}: {}", d["pod_cidr"]);
        }
        // no other node routes its block any more, after the loops' passes
        std::thread::sleep(std::time::Duration::from_secs_f64(3.0 * LOOP));
        for other in ["h1", "h2", "win1", "win2"] {
            if other == lab_host || (name == "win2" && other == "h2") {
                continue;
            }
            assert!(
                !lab.routes(other).contains(&b),
                "{other} still routes {name}'s {b}:\n{}",
                lab.routes(other)
            );
        }
        // and nothing awaits a reset
        let o = run(&["plan", "-i", i]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(!text(&o).contains("still awaits"), "{}", text(&o));
    }
    // then `up`: the other nodes stop naming the removed ones (firewall
    // scope, CNI configuration, boot task), and verify is green
    let o = run(&["verify", "-i", i]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = run(&["up", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&["verify", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
