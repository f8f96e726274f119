//! `linux:` settings, per host or for every Linux host under `defaults:`.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::validator::Validator;
use super::{Host, Os, Pos, Role};

/// How long `/etc/kwinctl/boot.sh` waits at boot, by default, for the next
/// hops of its routes to be on a connected network.
pub const DEFAULT_BOOT_WAIT_SECS: u32 = 120;
const MAX_BOOT_WAIT_SECS: u32 = 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinuxSettings {
    /// Seconds boot.sh waits for its routes' next hops before it gives up
    /// (systemd then runs it again, a few times).
    pub boot_wait: u32,
}

impl Default for LinuxSettings {
    fn default() -> Self {
        LinuxSettings {
            boot_wait: DEFAULT_BOOT_WAIT_SECS,
        }
    }
}

#[derive(Debug, Default, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLinux {
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub(super) boot_wait: Option<Spanned<u32>>,
}

impl Validator {
    /// The host's `linux:` block over the defaults' one (a Windows host's
    /// own `linux:` block is a mistake; the defaults' one does not apply to it).
    pub(super) fn linux(
        &mut self,
        os: Option<Os>,
        h: Option<&RawLinux>,
        d: Option<&RawLinux>,
    ) -> LinuxSettings {
        let mut s = LinuxSettings::default();
        if os == Some(Os::Windows) {
            if let Some(w) = h.and_then(|l| l.boot_wait.as_ref()) {
                self.problem(
                    Pos::from(w),
                    "linux.boot_wait is given for a Windows host",
                    "remove it: it sets how long a Linux node's boot.sh waits for the network",
                );
            }
            return s;
        }
        let wait = h
            .and_then(|l| l.boot_wait.as_ref())
            .or(d.and_then(|l| l.boot_wait.as_ref()));
        if let Some(w) = wait {
            if (1..=MAX_BOOT_WAIT_SECS).contains(&w.value) {
                s.boot_wait = w.value;
            } else {
                self.problem(
                    Pos::from(w),
                    format!("linux.boot_wait {} is out of range", w.value),
                    format!("give the seconds boot.sh waits for the network at boot, 1 to {MAX_BOOT_WAIT_SECS}"),
                );
            }
        }
        s
    }
}

impl Host {
    /// Whether this host may keep the cluster lock and registry: a Linux
    /// control-plane host (the one with the lowest address of them does).
    pub fn keeps_lock(&self) -> bool {
        self.os == Os::Linux && self.role == Role::ControlPlane
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::inventory::{Inventory, InventoryError};

    const INV: &str = "\
cluster:
  name: demo
  cluster_cidr: 192.168.0.0/16
  service_cidr: 10.96.0.0/12
  api_server: http://10.0.0.10:8080
  kubernetes_version: 1.7.16
hosts:
  - name: lin01
    os: linux
    role: control-plane
    address: 10.0.0.10
  - name: lin02
    os: linux
    address: 10.0.0.12
  - name: win01
    os: windows
    address: 10.0.0.11
";

    fn parse(s: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(Path::new("inv.yaml"), s)
    }

    fn waits(inv: &Inventory) -> Vec<u32> {
        inv.hosts.iter().map(|h| h.linux.boot_wait).collect()
    }

    #[test]
    fn boot_wait_defaults_and_overrides() {
        assert_eq!(waits(&parse(INV).unwrap()), [120, 120, 120]);
        let s = INV
            .replace(
                "hosts:\n",
                "defaults:\n  linux: { boot_wait: 30 }\nhosts:\n",
            )
            .replace(
                "    address: 10.0.0.12\n",
                "    address: 10.0.0.12\n    linux: { boot_wait: 5 }\n",
            );
        assert_eq!(waits(&parse(&s).unwrap()), [30, 5, 120]);
    }

    #[test]
    fn boot_wait_out_of_range_or_on_windows_is_refused() {
        for (bad, want) in [("0", "out of range"), ("3601", "out of range")] {
            let s = INV.replace(
                "    address: 10.0.0.12\n",
                &format!("    address: 10.0.0.12\n    linux: {{ boot_wait: {bad} }}\n"),
            );
            let e = parse(&s).unwrap_err();
            let p = &e.problems[0];
            assert!(p.message.contains(want), "{p:?}");
            assert_eq!(p.pos.line, 15, "{p:?}");
            assert!(p.hint.contains("1 to 3600"), "{p:?}");
        }
        let s = INV.replace(
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    linux: { boot_wait: 5 }\n",
        );
        let e = parse(&s).unwrap_err();
        assert!(e.problems[0].message.contains("for a Windows host"), "{e}");
        let s = INV.replace(
            "    address: 10.0.0.12\n",
            "    address: 10.0.0.12\n    linux: { wait: 5 }\n",
        );
        assert!(parse(&s).unwrap_err().to_string().contains("wait"));
    }
}
