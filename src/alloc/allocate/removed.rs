//! Hosts removed from the inventory: remembered until `reset` reaches them
//! (a host back in the inventory is not removed any more).

use super::Work;

pub(super) fn removed(w: &mut Work) {
    let inv = w.inv;
    w.removed = w.state.removed_from(|k| inv.host(k).is_some());
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, net, state};
    use super::*;
    use crate::state::Removed;

    #[test]
    fn a_host_gone_from_the_inventory_is_removed_until_it_is_back() {
        let i = inv(&[("a", "198.18.1.2", None)]);
        // b is in the state file only; c was removed before and is back
        let mut s = state(&[
            ("a", "198.19.1.0/24", "198.18.1.2"),
            ("b", "198.19.2.0/24", "198.18.1.3"),
        ]);
        s.removed.insert(
            "c".into(),
            Removed {
                os: None,
                address: None,
                cert_sha256: None,
                pod_cidr: net("198.19.3.0/24"),
            },
        );
        let i2 = inv(&[("a", "198.18.1.2", None), ("c", "198.18.1.4", None)]);
        let mut w = Work::new(&i, &s, &None).unwrap();
        removed(&mut w);
        assert_eq!(w.removed.keys().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(w.removed["b"].pod_cidr, net("198.19.2.0/24"));
        assert_eq!(w.removed["b"].address, Some("198.18.1.3".parse().unwrap()));
        let mut w = Work::new(&i2, &s, &None).unwrap();
        removed(&mut w);
        assert_eq!(w.removed.keys().collect::<Vec<_>>(), ["b"], "c is back");
    }
}
