//! Pods on the nodes kwinctl set up (issue 24), as the nodes' kubelets
//! would start them: on a simulated Windows host winsim decides a pod's IP
//! and DNS from the files and command lines kwinctl wrote (kubelet flags,
//! containerd's config.toml, the CNI conf, the HNS and Docker networks:
//! winsim/pods.py, winsim/README.md "Pods"); on a Linux host the lab's
//! stand-in CNI gives it an address of the node's block and ClusterFirst
//! DNS. For each profile and two releases: a pod on every Windows node gets
//! an IP inside its node's pod CIDR (from .3 on l2bridge), reaches a pod on
//! the Linux node and one on the other Windows node over TCP, and on
//! l2bridge gets the cluster DNS server and search list (kwinctl's
//! --cluster-dns; the transparent profile's pods keep the host's DNS, its
//! documented limit).

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text};

/// The lab cluster's DNS service: the 10th address of its service CIDR
/// 198.18.240.0/20 (kubeadm's default), and the default domain.
const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";
const NS: &str = "kw-pods";

/// `up` on the lab's inventory; panics with the output when it fails.
fn up(lab: &Lab) {
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The address `n` of a host's pod CIDR.
fn nth(lab: &Lab, host: &str, n: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(lab.pod_cidr(host).network()) + n)
}

/// One pod on every node (h1 and the Windows hosts); on every Windows node
/// its IP is inside the node's block, the `first` address of it, and it
/// reaches the Linux node's pod and the other Windows nodes' pods (TCP
/// 8080). With `dns`, also: nameserver = the cluster DNS, search list
/// `<ns>.svc.<domain> svc.<domain> <domain>`. Returns the pods.
fn pods_everywhere(lab: &Lab, windows: &[&str], first: u32, dns: bool) -> Vec<serde_json::Value> {
    let linux = lab.kpod("h1", NS, "on-h1");
    assert_eq!(linux["ip"], nth(lab, "h1", 2).to_string(), "{linux}");
    let pods: Vec<serde_json::Value> = windows
        .iter()
        .map(|h| lab.kpod(h, NS, &format!("on-{h}")))
        .collect();
    for (h, p) in windows.iter().zip(&pods) {
        let ip: std::net::Ipv4Addr = p["ip"]
            .as_str()
            .unwrap_or_else(|| panic!("{h}: the pod got no IP: {p}"))
            .parse()
            .unwrap();
        assert!(
            lab.pod_cidr(h).contains(&ip),
            "{h}: {ip} outside {}",
            lab.pod_cidr(h)
        );
        assert_eq!(ip, nth(lab, h, first), "{h}: {p}");
        if dns {
            assert_eq!(p["nameservers"], serde_json::json!([DNS_IP]), "{h}: {p}");
            assert_eq!(
                p["searches"],
                serde_json::json!([
                    format!("{NS}.svc.{DOMAIN}"),
                    format!("svc.{DOMAIN}"),
                    DOMAIN
                ]),
                "{h}: {p}"
            );
        }
    }
    for (h, p) in windows.iter().zip(&pods) {
        assert!(
            lab.pod_connects(p, linux["ip"].as_str().unwrap(), 8080),
            "pod on {h} -> pod on h1: {p}"
        );
        assert!(
            lab.pod_connects(&linux, p["ip"].as_str().unwrap(), 8080),
            "pod on h1 -> pod on {h}"
        );
        for (o, q) in windows.iter().zip(&pods) {
            if o != h {
                assert!(
                    lab.pod_connects(p, q["ip"].as_str().unwrap(), 8080),
                    "pod on {h} -> pod on {o}"
                );
            }
        }
    }
    pods
}

/// An l2bridge lab (a Linux control plane, Windows Server 2019 and 2022,
/// Containers installed) after `up` on Kubernetes `k8s` with containerd
/// `containerd` (2.x: its config.toml is version 3).
fn l2bridge_lab(k8s: &str, containerd: &str) -> Lab {
    let lab = Lab::up_l2bridge(
        1,
        &["2019", "2022"],
        Some("Installed"),
        k8s,
        containerd,
        None,
    );
    up(&lab);
    lab
}

// ------------------------------------------------------------------ l2bridge

#[test]
fn l2bridge_1_30_pods_get_an_ip_from_3_and_reach_each_other() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.30.4", "1.7.20");
    let pods = pods_everywhere(&lab, &["win1", "win2"], 3, false);
    // the endpoint's gateway is the host endpoint, P+2 (win-bridge)
    assert_eq!(pods[0]["gateway"], nth(&lab, "win1", 2).to_string());
    // a second pod takes the next address (host-local, sequential)
    let p = lab.kpod("win1", NS, "second");
    assert_eq!(p["ip"], nth(&lab, "win1", 4).to_string(), "{p}");
    lab.kpod_del("win1", NS, "second");
    assert!(
        !std::path::Path::new("/run/netns")
            .join(p["netns"].as_str().unwrap())
            .exists(),
        "kpod-del left {p}"
    );
    // `lab.sh down` takes every pod's namespace and listener with it
    let o = lab.down();
    assert!(o.status.success(), "{}", text(&o));
    for p in &pods {
        let ns = p["netns"].as_str().unwrap();
        assert!(
            !std::path::Path::new("/run/netns").join(ns).exists(),
            "{ns} left"
        );
        // gone, or a zombie its (re)parent has not reaped yet
        let pid = p["listener_pid"].as_u64().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
        assert!(
            stat.is_empty() || state == Some('Z'),
            "listener {pid} of {ns} left: {stat}"
        );
    }
}

#[test]
fn l2bridge_1_30_pods_get_the_cluster_dns() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.30.4", "1.7.20");
    pods_everywhere(&lab, &["win1", "win2"], 3, true);
}

#[test]
fn l2bridge_1_34_pods_get_an_ip_from_3_and_reach_each_other() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.34.2", "2.1.4");
    let pods = pods_everywhere(&lab, &["win1", "win2"], 3, false);
    // the CNI dirs came from containerd 2's version 3 config.toml
    assert!(
        pods[0]["why"].to_string().contains("version 3"),
        "{}",
        pods[0]
    );
}

#[test]
fn l2bridge_1_34_pods_get_the_cluster_dns() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.34.2", "2.1.4");
    pods_everywhere(&lab, &["win1", "win2"], 3, true);
}

// ------------------------------------------------------------------ transparent

/// A transparent-profile lab (a Linux control plane, two Windows Server
/// 2016 hosts) after `up` on Kubernetes `k8s`.
fn transparent_lab(k8s: &str) -> Lab {
    let lab = Lab::up_release(1, 2, k8s);
    up(&lab);
    lab
}

// Releases whose dockershim still reads a CONTAINER_NETWORK container's IP
// from Docker's NetworkSettings.Networks (before PR kubernetes#61940, 1.11):
// the pod IP is the container's, the first free address after the
// network's gateway (P+1), so P+2.
#[test]
fn transparent_1_9_pods_get_an_ip_and_reach_each_other() {
    if !require_root() {
        return;
    }
    let lab = transparent_lab("1.9.11");
    pods_everywhere(&lab, &["win1", "win2"], 2, false);
}

#[test]
fn transparent_1_10_pods_get_an_ip_and_reach_each_other() {
    if !require_root() {
        return;
    }
    let lab = transparent_lab("1.10.13");
    pods_everywhere(&lab, &["win1", "win2"], 2, false);
}

/// The transparent profile's known limit (docs/windows.md "Pod IP and
/// DNS"): dockershim gives the kubelet's DNS to the sandbox only, so a
/// CONTAINER_NETWORK pod keeps the host's resolvers even with --cluster-dns.
#[test]
fn transparent_1_10_pods_keep_the_hosts_dns() {
    if !require_root() {
        return;
    }
    let lab = transparent_lab("1.10.13");
    let p = lab.kpod("win1", NS, "host-dns");
    assert!(p["ip"].is_string(), "{p}");
    assert_ne!(p["nameservers"], serde_json::json!([DNS_IP]), "{p}");
    let why = p["why"].to_string();
    assert!(why.contains("sandbox"), "{p}");
}

/// From 1.11 dockershim asks the (noop) network plugin for the IP, and
/// the pod gets none (winsim/tests/test_pods.py shows it on a 1.13 host's
/// state): kwinctl refuses the release before touching a host.
#[test]
fn transparent_1_13_is_refused_before_any_host_changes() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_release(1, 2, "1.13.12");
    for cmd in ["check", "up"] {
        let o = kwinctl(&[cmd, "-i", &lab.inv()]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("gets no pod IP"), "{err}");
    }
    // nothing was placed on the hosts
    let st = lab.win_state_json("win1");
    assert!(
        st["services"].as_object().is_none_or(|s| s.is_empty()),
        "{st}"
    );
}

// ------------------------------------------------------------------ kubectl stand-in

/// The control plane's kubectl (the lab's stand-in) on an l2bridge 1.30
/// lab: nodes with their build label and kwinctl's pod CIDR; pods applied
/// on every node; a Linux image refused on a Windows node; pod IPs; TCP
/// between pods; delete by label. The DNS lookup is the ignored test's.
#[test]
fn kubectl_standin_drives_the_labs_pods() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.30.4", "1.7.20");
    kubectl_standin(&lab, false);
}

#[test]
fn kubectl_standin_pods_resolve_the_kubernetes_service() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.30.4", "1.7.20");
    kubectl_standin(&lab, true);
}

fn kubectl(lab: &Lab, args: &str) -> std::process::Output {
    lab.exec("h1", &format!("kubectl {args}"))
}

fn json_of(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn kubectl_standin(lab: &Lab, dns: bool) {
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let nodes = json_of(&kubectl(lab, "get nodes -o json"));
    let node = |host: &str| -> serde_json::Value {
        let ip = lab.ip(host);
        nodes["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["status"]["addresses"][0]["address"] == ip.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no node for {host}: {nodes}"))
    };
    for (h, build) in [("win1", "10.0.17763"), ("win2", "10.0.20348")] {
        let n = node(h);
        assert_eq!(
            n["metadata"]["labels"]["node.kubernetes.io/windows-build"], build,
            "{n}"
        );
        assert_eq!(n["spec"]["podCIDR"], lab.pod_cidr(h).to_string(), "{n}");
        assert_eq!(n["status"]["conditions"][0]["status"], "True", "{n}");
    }
    let pod = |name: &str, host: &str, image: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "kw-check"}},
            "spec": {"nodeName": node(host)["metadata"]["name"], "containers": [
                {"name": "c", "image": image, "args": ["netexec", "--http-port=8080"]}]}})
    };
    let agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.52";
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        pod("p-h1", "h1", agnhost), pod("p-win1", "win1", agnhost), pod("p-win2", "win2", agnhost),
        pod("p-linux-on-win", "win1", "busybox:1.36")]});
    let f = lab.dir().join("pods.json");
    std::fs::write(&f, list.to_string()).unwrap();
    let o = kubectl(lab, &format!("apply -f - < {}", f.display()));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("pod/p-win1 created"),
        "{}",
        text(&o)
    );

    let got = json_of(&kubectl(
        lab,
        &format!("get pods -n {NS} -l app=kw-check -o json"),
    ));
    assert_eq!(got["items"].as_array().unwrap().len(), 4, "{got}");
    let status = |name: &str| {
        json_of(&kubectl(lab, &format!("get pod {name} -n {NS} -o json")))["status"].clone()
    };
    let refused = status("p-linux-on-win");
    assert_eq!(refused["phase"], "Pending", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("no match for platform"),
        "{refused}"
    );
    let ip = |name: &str| {
        status(name)["podIP"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no podIP"))
            .to_string()
    };
    assert_eq!(ip("p-win1"), nth(lab, "win1", 3).to_string());
    assert_eq!(ip("p-win2"), nth(lab, "win2", 3).to_string());
    for (from, to) in [
        ("p-win1", "p-h1"),
        ("p-win1", "p-win2"),
        ("p-win2", "p-win1"),
        ("p-h1", "p-win2"),
    ] {
        let o = kubectl(
            lab,
            &format!(
                "exec {from} -n {NS} -- agnhost connect {}:8080 --timeout=5s",
                ip(to)
            ),
        );
        assert!(o.status.success(), "{from} -> {to}: {}", text(&o));
    }
    // nothing listens on 9: refused, as agnhost says
    let o = kubectl(
        lab,
        &format!(
            "exec p-win1 -n {NS} -- agnhost connect {}:9 --timeout=5s",
            ip("p-h1")
        ),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("REFUSED"),
        "{}",
        text(&o)
    );
    if dns {
        // a Linux pod expands kubernetes.default with its search list; a
        // Windows pod takes a name with a dot as fully qualified, so only
        // the full name resolves there (docs/windows.md, Pod IP and DNS)
        let fqdn = format!("kubernetes.default.svc.{DOMAIN}");
        for (p, name, resolves) in [
            ("p-h1", "kubernetes.default", true),
            ("p-win1", "kubernetes.default", false),
            ("p-win1", fqdn.as_str(), true),
            ("p-win2", fqdn.as_str(), true),
        ] {
            let o = kubectl(lab, &format!("exec {p} -n {NS} -- nslookup {name}"));
            assert_eq!(o.status.success(), resolves, "{p} {name}: {}", text(&o));
            if resolves {
                assert!(
                    String::from_utf8_lossy(&o.stdout).contains(&fqdn),
                    "{}",
                    text(&o)
                );
            } else {
                assert!(text(&o).contains("NXDOMAIN"), "{p} {name}: {}", text(&o));
            }
        }
    }
    // today's `verify` reads the nodes through the stand-in (its probe's
    // jsonpath): both Windows nodes Ready, with kwinctl's blocks
    let o = kwinctl(&["verify", "-i", &lab.inv(), "--output", "json"]);
    let s = common::summary(&o);
    for h in ["win1", "win2"] {
        let r = common::host(&s, h);
        let c = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "kubernetes node Ready")
            .unwrap_or_else(|| panic!("{h}: no node check in {}", text(&o)));
        assert_eq!(c["pass"], true, "{h}: {c}");
    }
    let o = kubectl(lab, "auth can-i create pods -n kw-pods");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "yes",
        "{}",
        text(&o)
    );
    let o = kubectl(lab, "rollout status ds/x");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown command \"rollout\""),
        "{}",
        text(&o)
    );
    let o = kubectl(
        lab,
        &format!("delete pods -n {NS} -l app=kw-check --wait=false"),
    );
    assert!(o.status.success(), "{}", text(&o));
    let got = json_of(&kubectl(lab, &format!("get pods -n {NS} -o json")));
    assert_eq!(got["items"], serde_json::json!([]), "{got}");
    assert!(
        !lab.dir()
            .join("pods/win1")
            .join(NS)
            .join("p-win1.json")
            .exists()
    );
}

// ------------------------------------------------------------------ verify --pods

/// `kwinctl verify --pods -o json` on the lab (the control plane's kubectl
/// is the stand-in), with `extra` arguments: its exit, and the `pods`
/// events by host.
fn verify_pods_with(
    lab: &Lab,
    extra: &[&str],
) -> (
    Option<i32>,
    std::collections::BTreeMap<String, serde_json::Value>,
    String,
) {
    let inv = lab.inv();
    let mut args = vec!["verify", "-i", &inv, "--pods", "--output", "json"];
    args.extend(extra);
    let o = kwinctl(&args);
    let events = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "pods")
        .map(|e| {
            (
                e["result"]["host"].as_str().unwrap().to_string(),
                e["result"].clone(),
            )
        })
        .collect();
    (o.status.code(), events, text(&o))
}

fn verify_pods(
    lab: &Lab,
) -> (
    Option<i32>,
    std::collections::BTreeMap<String, serde_json::Value>,
    String,
) {
    verify_pods_with(lab, &[])
}

fn check_of<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {r}"))
}

/// On l2bridge every node's test pod gets an IP in its block, reaches the
/// other nodes' pods and resolves the cluster DNS; with the kubelet's
/// --cluster-dns taken off one node, `verify --pods` fails naming that node
/// and its DNS check, and the test pods are deleted either way.
#[test]
fn verify_pods_passes_on_l2bridge_and_names_a_node_whose_dns_is_wrong() {
    if !require_root() {
        return;
    }
    let lab = l2bridge_lab("1.30.4", "1.7.20");
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let (code, pods, out) = verify_pods(&lab);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(pods.len(), 3, "{out}");
    for (h, r) in &pods {
        assert_eq!(r["ok"], true, "{h}: {r}");
        let ip: std::net::Ipv4Addr = r["pod_ip"].as_str().unwrap().parse().unwrap();
        assert!(lab.pod_cidr(h).contains(&ip), "{h}: {ip}");
        assert_eq!(check_of(r, "dns")["ok"], true, "{h}: {r}");
    }
    assert_eq!(check_of(&pods["win1"], "to h1")["ok"], true);
    assert_eq!(check_of(&pods["win1"], "to win2")["ok"], true);
    assert_eq!(check_of(&pods["h1"], "to win1")["ok"], true);
    // a Linux pod resolves kubernetes.default through its search list; a
    // Windows pod is not asked (Windows does not expand a name with a dot)
    assert_eq!(check_of(&pods["h1"], "dns-search")["ok"], true, "{out}");
    let names = |r: &serde_json::Value| -> Vec<String> {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        !names(&pods["win1"]).contains(&"dns-search".to_string()),
        "{out}"
    );
    let left = json_of(&kubectl(
        &lab,
        "get pods -n default -l kwinctl.io/pod-check -o json",
    ));
    assert_eq!(left["items"].as_array().unwrap().len(), 0, "{left}");

    // --limit: only win1's pod is judged (the others' pods are its targets)
    let (code, judged, out) = verify_pods_with(&lab, &["--limit", "win1"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(judged.keys().collect::<Vec<_>>(), ["win1"], "{out}");
    assert_eq!(check_of(&judged["win1"], "to h1")["ok"], true, "{out}");
    assert_eq!(check_of(&judged["win1"], "to win2")["ok"], true, "{out}");

    // win2's kubelet without --cluster-dns: its pods get 127.0.0.1
    let mut st = lab.win_state_json("win2");
    let bp = st["services"]["kubelet"]["binpath"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(bp.contains("--cluster-dns="), "{bp}");
    let cut: String = bp
        .split(' ')
        .filter(|a| !a.starts_with("--cluster-dns="))
        .collect::<Vec<_>>()
        .join(" ");
    st["services"]["kubelet"]["binpath"] = cut.into();
    common::write(&lab.win_state("win2"), &st.to_string());
    let (code, pods, out) = verify_pods(&lab);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(pods["win2"]["ok"], false, "{out}");
    assert_eq!(check_of(&pods["win2"], "dns")["ok"], false, "{out}");
    assert_eq!(pods["win1"]["ok"], true, "{out}");
    // the text output names the node and the check, one line a node
    let o = kwinctl(&["verify", "-i", &lab.inv(), "--pods"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    let line = t
        .lines()
        .find(|l| l.contains("pods: win2:"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(
        line.contains("FAILED") && line.contains("dns FAILED"),
        "{line}"
    );
    let left = json_of(&kubectl(
        &lab,
        "get pods -n default -l kwinctl.io/pod-check -o json",
    ));
    assert_eq!(left["items"].as_array().unwrap().len(), 0, "{left}");
}

/// On the transparent profile (1.10, Windows Server 2016: the image comes
/// from the inventory, agnhost has no 2016 build) pods get an IP and reach
/// each other; their DNS is not judged (the profile's documented limit),
/// and without an image for build 14393 the node's check says what to set.
#[test]
fn verify_pods_on_the_transparent_profile() {
    if !require_root() {
        return;
    }
    let lab = transparent_lab("1.10.13");
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    // a 1.10 kubelet labels its node beta.kubernetes.io/os only; a pod bound
    // to it that selects kubernetes.io/os fails the kubelet's admission
    let nodes = json_of(&kubectl(&lab, "get nodes -o json"));
    let win1 = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["status"]["addresses"][0]["address"] == lab.ip("win1").as_str())
        .cloned()
        .unwrap();
    let labels = &win1["metadata"]["labels"];
    assert!(labels["kubernetes.io/os"].is_null(), "{win1}");
    assert_eq!(labels["beta.kubernetes.io/os"], "windows", "{win1}");
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "selects-os", "namespace": NS},
        "spec": {"nodeName": win1["metadata"]["name"], "nodeSelector": {"kubernetes.io/os": "windows"},
                 "containers": [{"name": "c", "image": "mcr.microsoft.com/windows/servercore:ltsc2016"}]}});
    let f = lab.dir().join("selects-os.json");
    std::fs::write(&f, pod.to_string()).unwrap();
    let o = kubectl(&lab, &format!("apply -f - < {}", f.display()));
    assert!(o.status.success(), "{}", text(&o));
    let got = json_of(&kubectl(
        &lab,
        &format!("get pod selects-os -n {NS} -o json"),
    ));
    assert_eq!(got["status"]["phase"], "Failed", "{got}");
    assert_eq!(got["status"]["reason"], "MatchNodeSelector", "{got}");
    let o = kubectl(&lab, &format!("delete pod selects-os -n {NS}"));
    assert!(o.status.success(), "{}", text(&o));

    let (code, pods, out) = verify_pods(&lab);
    assert_eq!(code, Some(1), "{out}");
    let e = check_of(&pods["win1"], "image");
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("cluster.pod_check.images.windows"),
        "{e}"
    );
    let inv = std::fs::read_to_string(lab.inv()).unwrap().replacen(
        "cluster:\n",
        "cluster:\n  pod_check:\n    images:\n      windows: mcr.microsoft.com/windows/servercore:ltsc2016\n",
        1,
    );
    common::write(std::path::Path::new(&lab.inv()), &inv);
    let (code, pods, out) = verify_pods(&lab);
    assert_eq!(code, Some(0), "{out}");
    for h in ["win1", "win2"] {
        let r = &pods[h];
        assert_eq!(check_of(r, "ip")["ok"], true, "{h}: {r}");
        assert_eq!(check_of(r, "to h1")["ok"], true, "{h}: {r}");
        assert!(check_of(r, "dns")["ok"].is_null(), "{h}: {r}");
    }
    assert_eq!(check_of(&pods["h1"], "dns")["ok"], true, "{out}");
}
