//! End to end on Linux hosts that boot a real systemd: Debian containers
//! (systemd-nspawn) on the lab bridge, each with systemd as PID 1 and its own
//! sshd (see "systemd hosts" in `lab/lab.sh`). A reboot is real: the
//! container ends and boots again in a new network namespace, and the units
//! enabled in it run again. Needs root; run by `.ci/run`.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::lab::{Lab, Late, require_root};
use common::{host, kwinctl, summary, text, write};

/// Everything on this machine that names the lab's folder or its machines:
/// processes, mounts, cgroups, links.
fn leftovers(dir: &str, machines: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    let o = Command::new("pgrep").args(["-af", dir]).output().unwrap();
    left.extend(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| format!("process {l}")),
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains(dir))
            .map(|l| format!("mount {l}")),
    );
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    for m in machines {
        for h in ["systemd", "unified"] {
            let cg = format!("/sys/fs/cgroup/{h}/kwinctl-lab/{m}");
            if std::path::Path::new(&cg).exists() {
                left.push(format!("cgroup {cg}"));
            }
        }
        let veth = format!("vb-{m}");
        left.extend(
            links
                .lines()
                .filter(|l| l.contains(&veth))
                .map(|l| format!("link {l}")),
        );
    }
    left
}

fn out(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The lab's systemd hosts: systemd is PID 1, the address comes from a unit
/// ordered like a distro's networking service, a reboot is a real one (new
/// boot id, routes gone, units run again), and `down` leaves no process,
/// mount, cgroup or link behind.
#[test]
fn systemd_hosts_boot_reboot_and_leave_nothing_behind() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_with(1, 0, 2);
    let dir = lab.dir().display().to_string();
    let machines: Vec<String> = lab
        .hosts()
        .iter()
        .filter(|h| h.name.starts_with("sd"))
        .map(|h| h.netns.clone())
        .collect();
    assert_eq!(machines.len(), 2, "{:?}", lab.hosts());

    let o = lab.exec(
        "sd1",
        "cat /proc/1/comm; systemctl is-system-running --wait",
    );
    assert_eq!(out(&o), "systemd\nrunning", "{}", text(&o));
    let o = lab.exec(
        "sd1",
        "systemctl show -p ActiveState --value kwl-net.service; hostname",
    );
    assert_eq!(out(&o), "active\nsd1", "{}", text(&o));
    // the other hosts are reachable from it, on the lab bridge
    let ping = format!(
        "ping -c1 -W2 {} && ping -c1 -W2 {}",
        lab.ip("h1"),
        lab.ip("sd2")
    );
    assert!(lab.exec("sd1", &ping).status.success());

    let boot_id = || out(&lab.exec("sd1", "cat /proc/sys/kernel/random/boot_id"));
    let before = boot_id();
    let route = format!("ip route add 198.19.77.0/24 via {}", lab.ip("sd2"));
    assert!(lab.exec("sd1", &route).status.success());
    assert!(lab.exec("sd1", "touch /root/kept").status.success());
    lab.reboot("sd1");
    assert_ne!(boot_id(), before, "sd1 did not boot again");
    assert!(
        !lab.routes("sd1").contains("198.19.77.0"),
        "a route survived the reboot"
    );
    // its disk did survive
    assert!(lab.exec("sd1", "test -e /root/kept").status.success());
    let o = lab.exec("sd1", "systemctl is-system-running --wait");
    assert_eq!(out(&o), "running", "{}", text(&o));

    assert!(
        leftovers(&dir, &machines).len() >= 2,
        "the containers are not running"
    );
    let o = lab.down();
    assert!(o.status.success(), "{}", text(&o));
    let left = leftovers(&dir, &machines);
    assert!(left.is_empty(), "lab.sh down left: {left:#?}");
}

/// A lab's owner process, ended when dropped (also when the test fails).
struct Owner(std::process::Child);

impl Owner {
    fn end(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.end();
    }
}

/// `lab.sh gc` removes a lab of systemd hosts whose owner is gone, even when
/// its folder lost `lab.env` (it goes by the registry alone then), and stops
/// systemd hosts that no lab in the registry owns any more (their lab was
/// taken down by a lab.sh from before systemd hosts, which removes the
/// registry entry, bridge and namespaces but not the containers).
#[test]
fn gc_removes_an_orphaned_systemd_lab() {
    if !require_root() {
        return;
    }
    let lab_sh = concat!(env!("CARGO_MANIFEST_DIR"), "/lab/lab.sh");
    let bash = |args: &[&str], limit: u64| {
        let mut c = Command::new("bash");
        c.arg(lab_sh).args(args);
        common::run_bounded(c, Duration::from_secs(limit))
    };
    for case in ["no lab.env", "no registry entry"] {
        let dir = tempfile::Builder::new()
            .prefix("kwinctl-lab-")
            .tempdir()
            .unwrap();
        let d = dir.path().display().to_string();
        // The lab's owner: alive until the lab is set up as the case wants
        // (a lab.sh up of another test gc's labs whose owner is gone).
        let mut owner = Owner(Command::new("sleep").arg("600").spawn().unwrap());
        let owner_pid = owner.0.id().to_string();
        let o = common::run_bounded(
            {
                let mut c = Command::new("bash");
                c.args([lab_sh, "up", &d, "--linux", "0", "--systemd", "1"])
                    .env("KWINCTL_LAB_OWNER", &owner_pid);
                c
            },
            Duration::from_secs(300),
        );
        assert!(o.status.success(), "{case}: {}", text(&o));
        let machine = std::fs::read_to_string(dir.path().join("hosts.tsv")).unwrap();
        let machine = machine.split('\t').nth(2).unwrap().trim().to_string();
        let env = std::fs::read_to_string(dir.path().join("lab.env")).unwrap();
        let id = env
            .lines()
            .find_map(|l| l.strip_prefix("LAB_ID="))
            .unwrap()
            .to_string();
        if case == "no lab.env" {
            std::fs::remove_file(dir.path().join("lab.env")).unwrap();
        } else {
            std::fs::remove_dir_all(format!("/run/kwinctl-lab/{id}")).unwrap();
            let o = Command::new("ip")
                .args(["link", "del", &format!("kwl{id}")])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o));
        }
        assert!(!leftovers(&d, std::slice::from_ref(&machine)).is_empty());
        owner.end();
        let o = bash(&["gc"], 60);
        assert!(o.status.success(), "{case}: {}", text(&o));
        let left = leftovers(&d, &[machine]);
        assert!(left.is_empty(), "{case}: lab.sh gc left: {left:#?}");
    }
}

/// Poll `f` every half second until it gives a value, at most `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Wait for a systemd host to finish booting (every start job done, the
/// kwinctl unit's too): `systemctl is-system-running --wait`.
fn booted(lab: &Lab, host: &str) {
    let o = lab.exec(host, "systemctl is-system-running --wait");
    assert!(
        ["running", "degraded"].contains(&out(&o).as_str()),
        "{}",
        text(&o)
    );
}

/// Give one host a `linux:` block in the lab's inventory.
fn set_linux(lab: &Lab, host: &str, block: &str) {
    let s = std::fs::read_to_string(lab.inventory()).unwrap();
    let entry = format!("  - name: {host}\n    os: linux\n");
    assert!(s.contains(&entry), "{s}");
    write(
        lab.inventory(),
        &s.replace(&entry, &format!("{entry}    linux: {block}\n")),
    );
}

/// A host's failed checks in a verify run, as `name: detail`.
fn failed(o: &std::process::Output, h: &str) -> Vec<String> {
    common::failed_checks(host(&summary(o), h))
}

/// The routes every node must have to the others' pod CIDRs.
fn expected_routes(lab: &Lab, me: &str) -> Vec<String> {
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    lab.hosts()
        .iter()
        .filter(|o| o.name != me)
        .map(|o| {
            let cidr = state["pod_cidrs"][&o.name].as_str().unwrap();
            format!("{cidr} via {} ", o.ip)
        })
        .collect()
}

fn has_routes(lab: &Lab, me: &str) -> bool {
    let routes = lab.routes(me);
    expected_routes(lab, me).iter().all(|r| routes.contains(r))
}

/// Routes and forwarding survive a real reboot with nothing rerun: the unit
/// runs boot.sh at boot. Then a reboot where the host's address appears 10 s
/// after the network is "online" (nothing waits for it, as with DHCP, bonds,
/// VLANs or cloud-init): boot.sh waits for the next hops and the routes are
/// still in place, `verify` passes with no rerun. (The boot.sh before this
/// change ran once, got "Nexthop has invalid gateway" and gave up: the
/// routes stayed missing.)
#[test]
fn routes_survive_a_real_reboot_even_when_the_address_comes_up_late() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_with(1, 0, 2);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = lab.exec("sd1", "systemctl is-enabled kwinctl-boot.service");
    assert_eq!(out(&o), "enabled", "{}", text(&o));

    let boot_id = || out(&lab.exec("sd1", "cat /proc/sys/kernel/random/boot_id"));
    let before = boot_id();
    lab.reboot("sd1");
    assert_ne!(boot_id(), before, "sd1 did not reboot");
    booted(&lab, "sd1");
    assert!(has_routes(&lab, "sd1"), "{}", lab.routes("sd1"));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    lab.reboot_late("sd1", Late::Address(10));
    booted(&lab, "sd1");
    assert!(
        has_routes(&lab, "sd1"),
        "the routes did not come back after a late address:\n{}\n{}",
        lab.routes("sd1"),
        out(&lab.exec("sd1", "journalctl -b -o cat -u kwinctl-boot.service"))
    );
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // boot.sh said what it waited for, and when it was done
    let journal = out(&lab.exec("sd1", "journalctl -b -o cat -t kwinctl-boot"));
    assert!(
        journal.contains("waiting up to 120 s for next hops")
            && journal.contains(&lab.ip("h1"))
            && journal.contains("all routes set after"),
        "{journal}"
    );
}

/// When the next hops stay unreachable longer than boot.sh waits
/// (`linux.boot_wait`), it exits 1 naming them; systemd runs it again
/// (Restart=on-failure) so a late subnet still gets its routes; when the
/// retries run out the unit is failed and `verify` reports it with boot.sh's
/// journal line; `up` (once the network is there) sets the routes and runs
/// the unit again.
#[test]
fn a_boot_unit_that_gives_up_is_retried_reported_and_repaired() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_with(1, 0, 1);
    let i = lab.inv();
    set_linux(&lab, "sd1", "{ boot_wait: 2 }");
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let unit = out(&lab.exec("sd1", "cat /etc/systemd/system/kwinctl-boot.service"));
    assert!(
        unit.contains("Restart=on-failure") && unit.contains("After=network-online.target"),
        "{unit}"
    );

    // The lab machine reaches sd1, but h1 is on no connected network of
    // sd1's for 6 s: the first run gives up after 2 s, a later one succeeds.
    lab.reboot_late("sd1", Late::Subnet(6));
    let gave_up = wait_for(Duration::from_secs(20), "boot.sh giving up", || {
        let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
        failed(&o, "sd1")
            .into_iter()
            .find(|c| c.starts_with("boot unit run:") && c.contains("gave up"))
    });
    assert!(
        gave_up.contains(&format!(
            "never reachable on any interface: {}",
            lab.ip("h1")
        )) && gave_up.contains("Nexthop has invalid gateway"),
        "{gave_up}"
    );
    wait_for(Duration::from_secs(30), "verify passing again", || {
        let o = kwinctl(&["verify", "-i", &i]);
        (o.status.code() == Some(0)).then_some(())
    });
    assert!(has_routes(&lab, "sd1"));

    // Never within the retries: the unit ends failed (after its last run:
    // "failed at boot (exit-code) and systemd runs it again soon" is a run
    // before it), verify says why.
    lab.reboot_late("sd1", Late::Subnet(3600));
    let o = wait_for(Duration::from_secs(60), "the unit failing", || {
        let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
        failed(&o, "sd1")
            .iter()
            .any(|c| {
                c.starts_with("boot unit run: kwinctl-boot.service failed at boot (exit-code; ")
            })
            .then_some(o)
    });
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let checks = failed(&o, "sd1");
    // a 2 s wait; the last try may end a second later on a loaded machine
    assert!(
        checks
            .iter()
            .any(|c| c.contains("gave up after 2 s") || c.contains("gave up after 3 s")),
        "{checks:?}"
    );
    assert!(checks.iter().any(|c| c.starts_with("route ")), "{checks:?}");
    // the text report too, with nothing raw from the host
    let o = kwinctl(&["verify", "-i", &i]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("FAIL boot unit run: kwinctl-boot.service failed at boot"),
        "{t}"
    );
    assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");

    // The operator fixes the network; up sets the routes and reruns the unit.
    let fix = format!("ip addr add {}/24 dev host0", lab.ip("sd1"));
    assert!(lab.exec("sd1", &fix).status.success());
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let sd1 = host(&s, "sd1");
    assert!(
        sd1["actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["status"] == "changed"
                && a["action"]
                    .as_str()
                    .unwrap()
                    .starts_with("run kwinctl-boot.service again")),
        "{sd1}"
    );
    let o = lab.exec("sd1", "systemctl is-active kwinctl-boot.service");
    assert_eq!(out(&o), "active", "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A unit edited by hand or masked is a failed check; `up` restores an
/// edited one but leaves a mask to the operator (and says so); `reset`
/// stops, disables and removes the unit.
#[test]
fn hand_edited_or_masked_unit_is_reported_and_reset_removes_it() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_with(1, 0, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let unit = "/etc/systemd/system/kwinctl-boot.service";

    let edit = format!("sed -i 's/^Restart=on-failure/Restart=no/' {unit}");
    assert!(lab.exec("sd1", &edit).status.success());
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        failed(&o, "sd1"),
        [
            "boot unit: kwinctl-boot.service differs from kwinctl's (edited by hand, or written by another kwinctl version)"
        ]
    );
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out(&lab.exec("sd1", &format!("cat {unit}"))).contains("Restart=on-failure"));

    // masked: (the file in /etc stands in the way of `systemctl mask`)
    let mask =
        format!("rm {unit} && systemctl mask kwinctl-boot.service && systemctl daemon-reload");
    let o = lab.exec("sd1", &mask);
    assert!(o.status.success(), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let checks = failed(&o, "sd1");
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert!(
        checks[0].starts_with("boot unit: kwinctl-boot.service is masked"),
        "{checks:?}"
    );
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("kwinctl-boot.service is masked on this host"),
        "{}",
        text(&o)
    );
    let o = lab.exec("sd1", "systemctl is-enabled kwinctl-boot.service");
    assert_eq!(out(&o), "masked", "up undid the mask: {}", text(&o));
    let o = lab.exec("sd1", "systemctl unmask kwinctl-boot.service");
    assert!(o.status.success(), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    lab.reboot("sd1");
    booted(&lab, "sd1");
    let o = lab.exec("sd1", "systemctl is-active kwinctl-boot.service");
    assert_eq!(out(&o), "active", "{}", text(&o));

    let o = kwinctl(&["reset", "--yes", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = lab.exec(
        "sd1",
        "systemctl show -p LoadState -p ActiveState -p UnitFileState kwinctl-boot.service | sort; \
         ls -A /etc/kwinctl; ls /etc/systemd/system/*.wants | grep -c kwinctl",
    );
    assert_eq!(
        out(&o),
        "ActiveState=inactive\nLoadState=not-found\nUnitFileState=\n0",
        "{}",
        text(&o)
    );
    assert!(
        !lab.routes("sd1").contains("proto 198"),
        "{}",
        lab.routes("sd1")
    );
}
