//! Linux scripts: the probe, `/etc/kwinctl/boot.sh` and its unit, and one
//! script per host (prelude, each action as a function run by `kw_run`,
//! consecutive routes as one `ip -batch`, then optionally the probe).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use minijinja::{Value, context};

use super::action::Action;
use crate::alloc::Node;
use crate::diff::Describe;
use crate::hash::sha256_hex;
use crate::inventory::LinuxSettings;
use crate::render::{Renderer, comment};
use crate::verify::PING_WAIT_SECS;

/// The read-only probe; `reach` lists addresses to ping (verify).
/// `nodes`: also list the cluster's nodes with kubectl (control plane).
pub fn probe(r: &Renderer, reach: &[Ipv4Addr], nodes: bool) -> String {
    let reach: Vec<String> = reach.iter().map(|a| a.to_string()).collect();
    r.render(
        "linux/probe.sh",
        context! { reach, ping_wait => PING_WAIT_SECS, nodes },
    )
}

/// `/etc/kwinctl/boot.sh` for a node: its routes to the other nodes, and
/// the kwinctl routes the run leaves alone (`kept`); it waits for their next
/// hops as the host's `linux:` settings say.
pub fn boot_script(
    r: &Renderer,
    node: &Node,
    kept: &BTreeMap<Ipv4Net, Ipv4Addr>,
    s: &LinuxSettings,
) -> String {
    let mut all = node.routes();
    for (dst, via) in kept {
        all.entry(*dst).or_insert(*via);
    }
    // one line per route, made here rather than by a template loop (which
    // builds a map per route): verify renders every node's boot.sh to
    // compare its hash
    let mut routes = String::with_capacity(all.len() * 32);
    for (dst, via) in all {
        let _ = writeln!(routes, "{dst} {via}");
    }
    r.render(
        "linux/boot.sh",
        context! {
            host => node.name, cluster => node.cluster.name,
            pod_cidr => node.pod_cidr.to_string(), routes, boot_wait => s.boot_wait,
        },
    )
}

/// How many times systemd runs boot.sh at boot, in all, when it fails.
pub const BOOT_STARTS: u32 = 4;

/// `kwinctl-boot.service`: after network-online.target, and run again when
/// boot.sh gives up ([`BOOT_STARTS`] runs, a quarter of its wait apart, 1 to
/// 30 s), within a start limit that covers all of them.
pub fn unit(r: &Renderer, s: &LinuxSettings) -> String {
    let restart_sec = (s.boot_wait / 4).clamp(1, 30);
    let limit_interval = BOOT_STARTS * (s.boot_wait + restart_sec) + 60;
    r.render(
        "linux/boot.service",
        context! {
            boot_wait => s.boot_wait, restart_sec, starts => BOOT_STARTS, limit_interval,
        },
    )
}

/// How long a cluster lock's lease lasts unless its run renews it, by
/// default: a killed run's lock clears within this.
pub const LOCK_LEASE: u64 = 45;

/// The lease in use: [`LOCK_LEASE`], or `KWINCTL_LOCK_LEASE` seconds (5 to
/// 3600; for tests and slow links, see docs/locks.md).
pub fn lock_lease() -> u64 {
    lock_lease_setting().ok().flatten().unwrap_or(LOCK_LEASE)
}

/// `KWINCTL_LOCK_LEASE` as set: `None` when it is not, an error saying
/// what to write when it is set to anything but 5 to 3600 seconds (a
/// command that changes hosts refuses to start with it, rather than run
/// with another lease than the one asked for).
pub fn lock_lease_setting() -> Result<Option<u64>, String> {
    let Some(v) = std::env::var_os("KWINCTL_LOCK_LEASE") else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    match v.trim().parse::<u64>() {
        Ok(s) if (5..=3600).contains(&s) => Ok(Some(s)),
        _ => Err(format!(
            "KWINCTL_LOCK_LEASE={} is not a lease kwinctl can use: write a whole number of seconds \
             from 5 to 3600, or unset it for the default {LOCK_LEASE}s (docs/locks.md)",
            crate::text::echo(&v)
        )),
    }
}

/// Take the cluster lock for `run` (`owner` says who, for the message
/// another run gets), unless the cluster's generation is no longer
/// `generation`; a lock whose lease ran out is broken first. With the lock,
/// write the cluster's `registry` (its lines). Prints `KWL broken <age>
/// <expired since> <owner>` when it broke one, then `KWL taken`, `KWL
/// changed <gen>`, or `KWL held <seconds left>`, `KWL age <seconds>`, `KWL
/// owner <who>` and `KWL run <its run>`; `KWL failed <why>` when a write
/// failed (then no lock is left). Times are the lock host's monotonic
/// seconds since boot.
pub fn lock(r: &Renderer, run: &str, owner: &str, generation: u64, registry: &[String]) -> String {
    r.render(
        "linux/lock.sh",
        context! { run, owner, generation, registry => registry.join("\n"), lease => lock_lease() },
    )
}

/// Renew `run`'s lease: `KWL renewed`, `KWL lost` when the lock is no
/// longer its, or `KWL failed <why>` when the lease could not be written.
pub fn renew(r: &Renderer, run: &str) -> String {
    r.render("linux/renew.sh", context! { run, lease => lock_lease() })
}

/// Say who holds the cluster lock (`KWL free`, or the `held` lines of
/// [`lock`]); with `breaking`, break it if it is still `run`'s (`KWL
/// broke`).
pub fn lock_break(r: &Renderer, run: Option<&str>) -> String {
    r.render(
        "linux/lock_break.sh",
        context! { breaking => run.is_some(), run => run.unwrap_or_default(), lease => lock_lease() },
    )
}

/// Write the cluster's `registry` as the run left it and release the
/// cluster lock of `run`: `KWL released`, or `KWL lost` when it is no
/// longer this run's.
///
/// An empty registry is a cluster a `reset` left with no node: the lock
/// host's cluster files go with the lock ([`clear_cluster`]).
pub fn unlock(r: &Renderer, run: &str, registry: &[String]) -> String {
    if registry.is_empty() {
        return clear_cluster(r, run);
    }
    r.render(
        "linux/unlock.sh",
        context! { run, registry => registry.join("\n") },
    )
}

/// Release the cluster lock of `run` and remove every cluster file beside
/// it (registry, generation, lock, mutex; `/etc/kwinctl` when it is left
/// empty): `KWL released`, or `KWL lost` when the lock is no longer `run`'s
/// (then nothing is removed).
pub fn clear_cluster(r: &Renderer, run: &str) -> String {
    r.render("linux/clear_cluster.sh", context! { run })
}

/// The shell for one action (a body run under `set -e`): its template by
/// kind, with the action's fields.
pub fn action(r: &Renderer, a: &Action) -> String {
    let extra = match a {
        Action::WriteBootScript { content } => context! { sha => sha256_hex(content) },
        _ => Value::UNDEFINED,
    };
    r.action("linux", "sh", a, extra)
}

/// One script for a host: the prelude, each action as a function run by
/// `kw_run` (stopping at the first failure), then — when `then_probe` is
/// given — the probe, so that applying and re-probing is one remote call.
pub fn script(
    r: &Renderer,
    host: &str,
    cluster: &str,
    actions: &[&Action],
    then_probe: Option<(&[Ipv4Addr], bool)>,
) -> String {
    let mut s = r.render("linux/prelude.sh", context! { host, cluster });
    let mut i = 0;
    while i < actions.len() {
        // A run of two or more route additions, or of route removals, is
        // one `ip -batch` (a reset of a node with hundreds of peers was a
        // few processes per route).
        let dels = actions[i..]
            .iter()
            .take_while(|a| route_del(a).is_some())
            .count();
        let run = actions[i..]
            .iter()
            .take_while(|a| route_set(a).is_some())
            .count();
        let (what, body, runner, n) = if dels >= 2 {
            let last = i + dels - 1;
            let routes: Vec<String> = actions[i..=last]
                .iter()
                .filter_map(|a| route_del(a))
                .map(|dst| dst.to_string())
                .collect();
            (
                format!("actions {i}-{last}: remove {dels} routes"),
                r.render("linux/del_routes.sh", context! { routes }),
                format!("kw_run_batch {i} {last}"),
                dels,
            )
        } else if run >= 2 {
            let last = i + run - 1;
            let routes: Vec<_> = actions[i..=last]
                .iter()
                .filter_map(|a| route_set(a))
                .map(|(dst, via)| context! { dst => dst.to_string(), via => via.to_string() })
                .collect();
            (
                format!("actions {i}-{last}: {run} routes"),
                r.render("linux/set_routes.sh", context! { routes }),
                format!("kw_run_batch {i} {last}"),
                run,
            )
        } else {
            let a = actions[i];
            (
                format!("action {i}: {}", comment(&a.describe())),
                action(r, a),
                format!("kw_run {i}"),
                1,
            )
        };
        s.push_str(&format!(
            "\n# {what}\nkw_action_{i}() (\nset -e\n{}\n)\n{runner} kw_action_{i}\n[ \"$kw_rc\" -eq 0 ] || exit 0\n",
            body.trim_end()
        ));
        i += n;
    }
    if let Some((reach, nodes)) = then_probe {
        s.push('\n');
        s.push_str(&probe(r, reach, nodes));
    }
    s
}

/// A route that `del_route` removes (kwinctl's, whatever its next hop).
fn route_del(a: &Action) -> Option<Ipv4Net> {
    match a {
        Action::DelRoute { dst, .. } => Some(*dst),
        _ => None,
    }
}

/// A route that `ip route replace` sets: destination and next hop.
fn route_set(a: &Action) -> Option<(Ipv4Net, Ipv4Addr)> {
    match a {
        Action::AddRoute { dst, via } | Action::ReplaceRoute { dst, via, .. } => Some((*dst, *via)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Renderer {
        Renderer::new(&super::super::template_globals())
    }

    #[test]
    fn every_template_renders_and_actions_are_wrapped() {
        let r = r();
        let acts = [
            Action::RecordPodCidr {
                pod_cidr: "198.19.0.0/24".parse().unwrap(),
                cluster: "c".into(),
                cluster_id: "0a1b".into(),
                lock_host: "cp".into(),
            },
            Action::EnableForwarding,
            Action::AddRoute {
                dst: "198.19.1.0/24".parse().unwrap(),
                via: "198.18.1.3".parse().unwrap(),
            },
            Action::DelRoute {
                dst: "198.19.9.0/24".parse().unwrap(),
                via: None,
            },
            Action::WriteBootScript {
                content: "#!/bin/sh\necho hi\n".into(),
            },
            Action::RemoveNodeFiles,
        ];
        let refs: Vec<&Action> = acts.iter().collect();
        let s = script(
            &r,
            "h'1",
            "c",
            &refs,
            Some((&["198.18.1.3".parse().unwrap()], true)),
        );
        assert!(
            s.contains("kw_run 5 kw_action_5\n[ \"$kw_rc\" -eq 0 ] || exit 0\n"),
            "{s}"
        );
        assert!(s.contains("ip -4 route replace '198.19.1.0/24' via '198.18.1.3' proto 198"));
        assert!(s.contains("ip -4 route del '198.19.9.0/24' proto 198"));
        assert!(s.contains("#!/bin/sh\necho hi\nKWINCTL_BOOT_EOF\n"), "{s}");
        assert!(s.contains(&sha256_hex("#!/bin/sh\necho hi\n")), "{s}");
        assert!(s.contains("ping -n -q -c 1 -w 2 '198.18.1.3'"));
        assert!(s.trim_end().ends_with("printf 'KWF end\\n'"), "{s}");
        assert!(s.contains("kubectl get nodes"), "{s}");
        // the shell accepts it
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.sh");
        std::fs::write(&f, &s).unwrap();
        let st = std::process::Command::new("sh")
            .arg("-n")
            .arg(&f)
            .status()
            .unwrap();
        assert!(st.success(), "sh -n rejected the script");
    }

    #[test]
    fn consecutive_route_removals_are_one_ip_batch() {
        let r = r();
        let del = |i: u8| Action::DelRoute {
            dst: format!("198.19.{i}.0/24").parse().unwrap(),
            via: None,
        };
        let acts = [del(1), del(2), del(3), Action::RemoveNodeFiles];
        let refs: Vec<&Action> = acts.iter().collect();
        let s = script(&r, "h", "c", &refs, None);
        assert_eq!(s.matches("ip -4 -batch").count(), 1, "{s}");
        assert!(s.contains("route flush exact 198.19.2.0/24 proto "), "{s}");
        assert!(s.contains("kw_run_batch 0 2 kw_action_0\n"), "{s}");
        assert!(s.contains("kw_run 3 kw_action_3\n"), "{s}");
    }

    #[test]
    fn consecutive_routes_are_one_ip_batch() {
        let r = r();
        let route = |i: u8| Action::AddRoute {
            dst: format!("198.19.{i}.0/24").parse().unwrap(),
            via: format!("198.18.1.{i}").parse().unwrap(),
        };
        let acts = [
            Action::EnableForwarding,
            route(2),
            route(3),
            route(4),
            Action::DelRoute {
                dst: "198.19.9.0/24".parse().unwrap(),
                via: None,
            },
            route(5),
        ];
        let refs: Vec<&Action> = acts.iter().collect();
        let s = script(&r, "h1", "c", &refs, None);
        assert!(s.contains("kw_run 0 kw_action_0\n"), "{s}");
        assert!(s.contains("kw_run_batch 1 3 kw_action_1\n"), "{s}");
        assert!(
            s.contains(
                "route replace 198.19.2.0/24 via 198.18.1.2 proto 198\n\
                 route replace 198.19.3.0/24 via 198.18.1.3 proto 198\n\
                 route replace 198.19.4.0/24 via 198.18.1.4 proto 198\n\
                 KWINCTL_ROUTES_EOF\n"
            ),
            "{s}"
        );
        // a lone route stays its own action
        assert!(s.contains("kw_run 4 kw_action_4\n"), "{s}");
        assert!(s.contains("kw_run 5 kw_action_5\n"), "{s}");
        assert_eq!(s.matches("ip -4 -batch").count(), 1, "{s}");
    }

    /// boot.sh waits for its routes' next hops as long as the inventory
    /// says, and the unit runs it after network-online.target and again
    /// when it gives up, within a start limit that covers every run.
    #[test]
    fn boot_script_and_unit_follow_boot_wait() {
        let node = crate::alloc::test_node(
            "a",
            crate::inventory::Os::Linux,
            "198.18.1.2",
            "198.19.0.0/24",
            "198.19.0.0/16",
            &[("b'x", "198.18.1.3", "198.19.1.0/24")],
        );
        let s = LinuxSettings { boot_wait: 8 };
        let b = boot_script(&r(), &node, &BTreeMap::new(), &s);
        assert!(b.contains("kw_wait=8\n"), "{b}");
        assert!(b.contains("\n198.19.1.0/24 198.18.1.3\n"), "{b}");
        // the routes block: the node's routes, then a kept one, a line each
        let kept = BTreeMap::from([(
            "198.19.9.0/24".parse().unwrap(),
            "198.18.1.9".parse().unwrap(),
        )]);
        let with_kept = boot_script(&r(), &node, &kept, &s);
        assert!(
            with_kept
                .contains("\nkw_todo='\n198.19.1.0/24 198.18.1.3\n198.19.9.0/24 198.18.1.9\n'\n"),
            "{with_kept}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("boot.sh");
        std::fs::write(&f, &b).unwrap();
        let st = std::process::Command::new("sh")
            .arg("-n")
            .arg(&f)
            .status()
            .unwrap();
        assert!(st.success(), "sh -n rejected boot.sh");
        let u = unit(&r(), &s);
        for line in [
            "Wants=network-online.target",
            "After=network-online.target",
            "Restart=on-failure",
            "RestartSec=2",
            "StartLimitBurst=4",
            // 4 runs of 8 s, 2 s apart, and a minute to spare
            "StartLimitIntervalSec=100",
            "TimeoutStartSec=38",
        ] {
            assert!(u.lines().any(|l| l == line), "{line}: {u}");
        }
        let u = unit(&r(), &LinuxSettings { boot_wait: 600 });
        assert!(u.lines().any(|l| l == "RestartSec=30"), "{u}");
    }

    /// The probe template and the facts parser agree: run the probe here,
    /// read-only, and parse what it prints.
    #[test]
    fn the_probe_runs_and_parses() {
        use std::io::Write;
        let script = probe(&r(), &["127.0.0.1".parse().unwrap()], true);
        let mut child = std::process::Command::new("sh")
            .arg("-s")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let f =
            super::super::facts::LinuxFacts::parse(&stdout, &String::from_utf8_lossy(&out.stderr))
                .unwrap_or_else(|e| panic!("{e}\n{stdout}"));
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(f.hostname, hostname.trim());
        assert!(f.routes.iter().any(|r| r.dev.is_some()), "{stdout}");
        assert_eq!(f.reach.len(), 1, "{stdout}");
    }
}
