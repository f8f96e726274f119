//! Registry entries the nodes contradict: the registry gives a block to a
//! host this inventory does not have, at an address that is a host of this
//! inventory whose node answered. One address is one machine, and the
//! machine answered as this inventory's host: the entry is what a former
//! name of it left (a cluster reset by an older kwinctl and brought up
//! again under new names, say), not another operator's node. It is dropped
//! — its block is not reserved, no route via the address is frozen, and
//! the registry this run leaves no longer lists it — and a note says so.

use std::collections::BTreeMap;

use super::Work;

pub(super) fn drop_contradicted(w: &mut Work) {
    let answered: BTreeMap<_, &str> = w
        .inv
        .hosts
        .iter()
        .filter(|h| w.record(h).is_some())
        .map(|h| (h.address, h.name.as_str()))
        .collect();
    let stale: Vec<String> = w
        .registry
        .iter()
        .filter(|(k, e)| {
            w.inv.host(k).is_none()
                && !w.removed.contains_key(*k)
                && answered
                    .get(&e.address)
                    .is_some_and(|n| !n.eq_ignore_ascii_case(k))
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in stale {
        let e = w.registry.remove(&k).expect("listed above");
        let now = answered[&e.address];
        let recorded = w
            .inv
            .hosts
            .iter()
            .find(|h| h.address == e.address)
            .and_then(|h| w.record(h))
            .and_then(|r| r.pod_cidr)
            .map(|n| format!("records {n}"))
            .unwrap_or_else(|| "records no block".into());
        w.notes.push(format!(
            "the cluster's registry gave {} to {} at {}, but {} is {now} in this inventory and its \
             node answered ({recorded}): a former name of the same machine; the entry is dropped",
            e.pod_cidr, e.host, e.address, e.address
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{inv, net, records, state};
    use super::super::{claims::claims, moved::reserve, removed::removed};
    use super::*;
    use crate::alloc::Registered;

    #[test]
    fn an_entry_at_an_address_of_an_answering_host_is_dropped_not_frozen() {
        // cp1 and win1 were the same machines' former names; z is another
        // operator's node at an address nobody here has
        let i = inv(&[
            ("k8s-cp01", "198.18.1.2", None),
            ("win-node01", "198.18.1.5", None),
        ]);
        let s = state(&[]);
        let mut seen = records(&[("k8s-cp01", "198.19.4.0/24"), ("win-node01", "")]);
        let entry = |h: &str, c: &str, a: &str| Registered {
            host: h.into(),
            pod_cidr: net(c),
            address: a.parse().unwrap(),
        };
        seen.as_mut().unwrap().get_mut("k8s-cp01").unwrap().registry = vec![
            entry("cp1", "198.19.0.0/24", "198.18.1.2"),
            entry("win1", "198.19.2.0/24", "198.18.1.5"),
            entry("z", "198.19.8.0/24", "198.18.1.8"),
        ];
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        removed(&mut w);
        claims(&mut w);
        drop_contradicted(&mut w);
        reserve(&mut w);
        assert_eq!(w.registry.keys().collect::<Vec<_>>(), ["z"]);
        assert!(!w.frozen.vias.contains_key(&"198.18.1.5".parse().unwrap()));
        assert!(!w.frozen.vias.contains_key(&"198.18.1.2".parse().unwrap()));
        assert!(w.frozen.vias.contains_key(&"198.18.1.8".parse().unwrap()));
        let reserved: Vec<String> = w.reserved.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(reserved, ["198.19.8.0/24"]);
        assert!(
            w.notes.iter().any(|n| n.starts_with(
                "the cluster's registry gave 198.19.2.0/24 to win1 at 198.18.1.5, but 198.18.1.5 is \
                 win-node01"
            )),
            "{:?}",
            w.notes
        );

        // without the stage (what kwinctl did before): frozen
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        removed(&mut w);
        claims(&mut w);
        reserve(&mut w);
        assert!(w.frozen.vias.contains_key(&"198.18.1.5".parse().unwrap()));
    }

    #[test]
    fn an_entry_at_the_address_of_a_host_that_did_not_answer_stays() {
        let i = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
        let s = state(&[]);
        let mut seen = records(&[("a", "198.19.1.0/24")]);
        seen.as_mut().unwrap().get_mut("a").unwrap().registry = vec![Registered {
            host: "old".into(),
            pod_cidr: net("198.19.3.0/24"),
            address: "198.18.1.3".parse().unwrap(),
        }];
        let mut w = super::super::Work::new(&i, &s, &seen).unwrap();
        removed(&mut w);
        claims(&mut w);
        drop_contradicted(&mut w);
        assert_eq!(w.registry.keys().collect::<Vec<_>>(), ["old"]);
    }
}
