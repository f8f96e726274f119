//! How `plan` names an upgrade: per component whose running release differs
//! from the declared one on a node with changes, the releases and what
//! `up` does around the change (`run/upgrade.rs`: cordon and drain, the
//! restart, uncordon once Ready).

/// "upgrade kubelet 1.30.4 → 1.31.2 (cordon, drain, restart)"; a release
/// older than the running one says "downgrade".
pub fn line(component: &str, from: &str, to: &str, older: bool) -> String {
    format!(
        "{} {component} {from} → {to} (cordon, drain, restart)",
        if older { "downgrade" } else { "upgrade" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_releases_and_the_steps() {
        assert_eq!(
            line("kubelet", "1.30.4", "1.31.2", false),
            "upgrade kubelet 1.30.4 → 1.31.2 (cordon, drain, restart)"
        );
        assert_eq!(
            line("containerd", "1.7.28", "1.7.20", true),
            "downgrade containerd 1.7.28 → 1.7.20 (cordon, drain, restart)"
        );
    }
}
