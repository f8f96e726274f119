//! The allocation itself: each host's claim (its node's record, its pin,
//! the state file), collisions settled or disputed, new blocks, and what
//! is frozen.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;

use super::identity::cluster_id;
use super::registry::registry_complete;
use super::{AllocError, Allocation, Assignment, Dispute, Frozen, Observed, Source, gateway};
use crate::inventory::{Host, Inventory};
use crate::state::{Known, Removed, STATE_VERSION, State};

fn key(h: &Host) -> String {
    h.name.to_ascii_lowercase()
}

/// A host's claim on a block before collisions are settled.
#[derive(Debug, Clone, Copy)]
struct Claim {
    net: Ipv4Net,
    source: Source,
}

/// Allocate every host's pod CIDR: see the module's documentation.
pub fn allocate(
    inv: &Inventory,
    state: &State,
    observed: &Observed,
) -> Result<Allocation, AllocError> {
    let cc = inv.cluster.cluster_cidr;
    let prefix = inv.cluster.node_prefix;
    let name = &inv.cluster.name;
    let mut notes = Vec::new();
    let mut frozen = Frozen::default();
    let mut disputes: BTreeMap<usize, String> = BTreeMap::new();
    let record = |h: &Host| observed.as_ref().and_then(|o| o.get(&key(h)));
    let sound = |n: &Ipv4Net| n.prefix_len() == prefix && cc.contains(n) && n.network() == n.addr();
    let registry = super::registry::read(inv, observed);
    let cluster_id = cluster_id(inv, state, observed, &mut notes)?;

    // Removed hosts: remembered until `reset` reaches them (a host back in
    // the inventory is not removed any more).
    let mut removed: BTreeMap<String, Removed> = state.removed.clone();
    for (k, net) in &state.pod_cidrs {
        if inv.host(k).is_none() && !removed.contains_key(k) {
            removed.insert(
                k.clone(),
                Removed {
                    os: state.hosts.get(k).map(|h| h.os),
                    address: state.hosts.get(k).map(|h| h.address),
                    pod_cidr: *net,
                },
            );
        }
    }
    removed.retain(|k, _| inv.host(k).is_none());

    // 1-3: each host's claim.
    let mut claims: Vec<Option<Claim>> = vec![None; inv.hosts.len()];
    let mut unknown: Vec<usize> = Vec::new();
    for (i, h) in inv.hosts.iter().enumerate() {
        let rec = record(h);
        if let Some((n, id)) = rec.and_then(|r| r.cluster.as_ref())
            && (n != name || *id != cluster_id)
        {
            disputes.insert(
                i,
                format!(
                    "the node belongs to cluster {n:?} (id {id}), not to {name:?} (id {cluster_id}): \
                     nothing was changed on it; if it should join this cluster, run `kwinctl reset` \
                     with the other cluster's inventory first"
                ),
            );
            continue;
        }
        match (rec.and_then(|r| r.pod_cidr), h.pod_cidr) {
            (Some(r), _) if !sound(&r) => {
                disputes.insert(
                    i,
                    format!(
                        "the node records pod CIDR {r}, which is not a /{prefix} block of the cluster \
                         CIDR {cc}: fix the node's record or reset the node (`kwinctl reset --limit {}`)",
                        h.name
                    ),
                );
            }
            (Some(r), Some(pin)) if r != pin => {
                disputes.insert(
                    i,
                    format!(
                        "the node records pod CIDR {r} but the inventory pins {pin}: nothing was changed \
                         on it. To move the node, run `kwinctl reset --limit {}` first; to keep it, pin \
                         `pod_cidr: {r}`",
                        h.name
                    ),
                );
            }
            (Some(r), Some(_)) => {
                claims[i] = Some(Claim {
                    net: r,
                    source: Source::Pinned,
                })
            }
            (Some(r), None) => {
                claims[i] = Some(Claim {
                    net: r,
                    source: Source::Node,
                });
                match state.pod_cidrs.get(&key(h)) {
                    Some(s) if *s != r => notes.push(format!(
                        "{}: the node records {r}; the state file had {s}: the node's record is kept",
                        h.name
                    )),
                    None => notes.push(format!(
                        "{}: the node records {r}; the state file had none: adopted",
                        h.name
                    )),
                    _ => {}
                }
            }
            (None, Some(pin)) => {
                claims[i] = Some(Claim {
                    net: pin,
                    source: Source::Pinned,
                })
            }
            (None, None) => match state
                .pod_cidrs
                .get(&key(h))
                .or_else(|| registry.get(&key(h)).map(|e| &e.pod_cidr))
            {
                Some(s) if sound(s) => {
                    claims[i] = Some(Claim {
                        net: *s,
                        source: Source::State,
                    })
                }
                Some(s) => notes.push(format!(
                    "{}: the state file's {s} no longer fits cluster CIDR {cc} /{prefix}: a new block is assigned",
                    h.name
                )),
                None if observed.is_some() && rec.is_none() => unknown.push(i),
                None => {}
            },
        }
    }

    // Blocks nobody may be given: removed hosts', and those kwinctl routes
    // somewhere via an address no host of this inventory has.
    let mut reserved: Vec<(Ipv4Net, String)> = removed
        .iter()
        .map(|(k, r)| {
            (
                r.pod_cidr,
                format!(
                    "removed host {k} may still hold it until `kwinctl reset --limit {k}` reaches it"
                ),
            )
        })
        .collect();
    let known: BTreeSet<Ipv4Addr> = inv
        .hosts
        .iter()
        .map(|h| h.address)
        .chain(removed.values().filter_map(|r| r.address))
        .collect();
    // Hosts that moved: the address the state file (or the registry) had
    // for a host of this inventory, no host has any more. A kwinctl route
    // via it to the block that host still claims is that host's, and is
    // moved to its new address (not another operator's node).
    let mut former: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
    for (i, h) in inv.hosts.iter().enumerate() {
        let old = state
            .hosts
            .get(&key(h))
            .map(|k| k.address)
            .into_iter()
            .chain(registry.get(&key(h)).map(|e| e.address));
        for a in old {
            if !known.contains(&a) {
                former.insert(a, i);
            }
        }
    }
    let mut moved: BTreeMap<usize, Ipv4Addr> = BTreeMap::new();
    for h in &inv.hosts {
        for (dst, via) in record(h).map(|r| r.routes.as_slice()).unwrap_or(&[]) {
            if let Some(v) = via
                && let Some(&j) = former.get(v)
                && claims[j].is_some_and(|c| c.net == *dst)
            {
                moved.insert(j, *v);
                continue;
            }
            if let Some(v) = via
                && !known.contains(v)
                && cc.contains(dst)
            {
                let why = format!(
                    "{} routes it via {v} (a kwinctl route), an address no host of this inventory has: \
                     another operator's node, or a removed one; left alone",
                    h.name
                );
                if !frozen.vias.contains_key(v) {
                    notes.push(format!("{dst} via {v}: {why}"));
                }
                frozen.vias.insert(*v, why.clone());
                frozen.dsts.insert(*dst, why.clone());
                reserved.push((*dst, why));
            }
        }
    }

    for (j, old) in &moved {
        let h = &inv.hosts[*j];
        notes.push(format!(
            "{} moved from {old} to {}: it keeps {} (its record and the state file name it); every \
             peer's route to it moves to the new address, and the route via {old} goes",
            h.name,
            h.address,
            claims[*j].map(|c| c.net.to_string()).unwrap_or_default()
        ));
    }
    for e in registry.values() {
        if inv.host(&e.host).is_some() || removed.contains_key(&e.host) {
            continue;
        }
        let why = format!(
            "the cluster's registry (on the lock host) gives it to {} ({}), a host this inventory does \
             not have: another operator's; left alone",
            e.host, e.address
        );
        notes.push(format!("{}: {why}", e.pod_cidr));
        frozen.vias.entry(e.address).or_insert_with(|| why.clone());
        frozen.dsts.entry(e.pod_cidr).or_insert_with(|| why.clone());
        reserved.push((e.pod_cidr, why));
    }

    // Collisions. Two node records, or a record and another host's pin,
    // are disputes; a record or a pin beats the state file; nothing may
    // take a reserved block that a node records.
    let mut by_net: BTreeMap<Ipv4Net, Vec<usize>> = BTreeMap::new();
    for (i, c) in claims.iter().enumerate() {
        if let Some(c) = c {
            by_net.entry(c.net).or_default().push(i);
        }
    }
    let strong = |c: &Claim| matches!(c.source, Source::Node | Source::Pinned);
    for (net, holders) in &by_net {
        let strong_ones: Vec<usize> = holders
            .iter()
            .copied()
            .filter(|i| claims[*i].as_ref().is_some_and(strong))
            .collect();
        if strong_ones.len() > 1 {
            let names: Vec<&str> = strong_ones
                .iter()
                .map(|i| inv.hosts[*i].name.as_str())
                .collect();
            for i in &strong_ones {
                disputes.insert(
                    *i,
                    format!(
                        "{} claim {net} (the nodes' records and the inventory's pins): two nodes cannot \
                         share a block. Nothing depending on it was changed; reset the node that should \
                         not have it (`kwinctl reset --limit NAME`), or fix its pin",
                        names.join(" and ")
                    ),
                );
            }
            continue;
        }
        for i in holders {
            if strong_ones.contains(i) || strong_ones.is_empty() && holders.len() == 1 {
                continue;
            }
            let h = &inv.hosts[*i];
            notes.push(format!(
                "{}: the state file's {net} is {}: a new block is assigned",
                h.name,
                if strong_ones.is_empty() {
                    "recorded for another host too".to_string()
                } else {
                    format!("held by {}", inv.hosts[strong_ones[0]].name)
                }
            ));
            claims[*i] = None;
        }
    }
    for (i, c) in claims.iter_mut().enumerate() {
        let Some(claim) = c else { continue };
        if disputes.contains_key(&i) {
            continue;
        }
        if let Some((_, why)) = reserved
            .iter()
            .find(|(r, _)| crate::inventory::nets_overlap(r, &claim.net))
        {
            match claim.source {
                Source::Node | Source::Pinned => {
                    disputes.insert(
                        i,
                        format!(
                            "{} is {} it, but {why}",
                            claim.net,
                            if claim.source == Source::Node {
                                "the node's record of"
                            } else {
                                "pinned for"
                            }
                        ),
                    );
                }
                _ => *c = None,
            }
        }
    }

    // 4. new blocks, lowest first, in inventory order: only when every
    // block somebody may hold is known.
    // Taken: every block claimed, and every block a node or the state file
    // names, whoever's and however disputed.
    let mut taken: BTreeSet<Ipv4Net> = claims.iter().flatten().map(|c| c.net).collect();
    for h in &inv.hosts {
        taken.extend(record(h).and_then(|r| r.pod_cidr).map(|n| n.trunc()));
        taken.extend(h.pod_cidr);
    }
    taken.extend(state.pod_cidrs.values().map(|n| n.trunc()));
    let odd: Vec<Ipv4Net> = reserved.iter().map(|(n, _)| *n).collect();
    let mut candidates = cc
        .subnets(prefix)
        .map_err(|e| AllocError(format!("cannot split {cc} into /{prefix}: {e}")))?;
    let unknown_names: Vec<&str> = unknown
        .iter()
        .map(|i| inv.hosts[*i].name.as_str())
        .collect();
    // Hosts that did not answer and are in neither the state file nor the
    // registry hold no block when the lock host answered for this cluster
    // (or for none yet: a fresh bring-up): every run registers a block
    // there before any node records it. Then they hold nobody up.
    let proven_empty =
        !unknown.is_empty() && registry_complete(inv, state, observed, name, &cluster_id);
    if proven_empty {
        notes.push(format!(
            "{} did not answer and {} no block: the cluster's registry on the lock host lists none \
             for {}, and the state file neither; the other new hosts get theirs",
            unknown_names.join(", "),
            if unknown.len() == 1 { "holds" } else { "hold" },
            if unknown.len() == 1 { "it" } else { "them" },
        ));
    }
    for (i, h) in inv.hosts.iter().enumerate() {
        if claims[i].is_some() || disputes.contains_key(&i) || unknown.contains(&i) {
            continue;
        }
        if !unknown.is_empty() && !proven_empty {
            disputes.insert(
                i,
                format!(
                    "needs a new block, but the blocks of {} are unknown (not reachable, and not in the \
                     state file): kwinctl will not guess. Run again when they answer, or pin `pod_cidr` \
                     for {}",
                    unknown_names.join(", "),
                    h.name
                ),
            );
            continue;
        }
        let block = loop {
            match candidates.next() {
                Some(c) if taken.contains(&c) => continue,
                Some(c) if odd.iter().any(|r| crate::inventory::nets_overlap(r, &c)) => continue,
                Some(c) if c.contains(&h.address) => continue,
                Some(c) => break c,
                None => {
                    return Err(AllocError(format!(
                        "cluster CIDR {cc} has no free /{prefix} block left for host {}: use a larger cluster_cidr",
                        h.name
                    )));
                }
            }
        };
        taken.insert(block);
        claims[i] = Some(Claim {
            net: block,
            source: Source::New,
        });
    }
    for i in &unknown {
        disputes.entry(*i).or_insert_with(|| {
            "not reachable, and not in the state file: its block is unknown".to_string()
        });
    }

    // Freeze what disputed hosts claim and where they are.
    for (i, why) in &disputes {
        let h = &inv.hosts[*i];
        let why = format!("{} is disputed: {why}", h.name);
        frozen.vias.insert(h.address, why.clone());
        let claimed = record(h)
            .and_then(|r| r.pod_cidr)
            .into_iter()
            .chain(h.pod_cidr)
            .chain(state.pod_cidrs.get(&key(h)).copied());
        for net in claimed {
            frozen.dsts.insert(net.trunc(), why.clone());
        }
    }
    for (k, r) in &removed {
        notes.push(format!(
            "removed host {k} ({}{}) still awaits `kwinctl reset --limit {k}`; its block is not handed out until then",
            r.address.map(|a| format!("{a}, ")).unwrap_or_default(),
            r.pod_cidr
        ));
    }

    let mut assignments = Vec::new();
    let mut out_disputes = Vec::new();
    for (i, h) in inv.hosts.iter().enumerate() {
        if let Some(why) = disputes.get(&i) {
            out_disputes.push(Dispute {
                host: h.name.clone(),
                reason: why.clone(),
            });
        } else if let Some(c) = claims[i] {
            assignments.push(Assignment {
                host: h.name.clone(),
                os: h.os,
                address: h.address,
                pod_cidr: c.net,
                gateway: gateway(&c.net),
                source: c.source,
            });
        }
    }
    let mut pod_cidrs: BTreeMap<String, _> = assignments
        .iter()
        .map(|a| (a.host.to_ascii_lowercase(), a.pod_cidr))
        .collect();
    // A disputed host keeps what the state file had for it.
    for d in &out_disputes {
        let k = d.host.to_ascii_lowercase();
        if let Some(n) = state.pod_cidrs.get(&k) {
            pod_cidrs.insert(k, *n);
        }
    }
    let mut hosts = state.hosts.clone();
    hosts.retain(|k, _| pod_cidrs.contains_key(k));
    for h in &inv.hosts {
        hosts.insert(
            key(h),
            Known {
                os: h.os,
                address: h.address,
            },
        );
    }
    hosts.retain(|k, _| pod_cidrs.contains_key(k));
    let out_registry = super::registry::after(inv, registry, &assignments, &pod_cidrs, &removed);
    Ok(Allocation {
        assignments,
        disputes: out_disputes,
        notes,
        registry: out_registry,
        frozen: Arc::new(frozen),
        state: State {
            version: STATE_VERSION,
            cluster: name.clone(),
            cluster_id: Some(cluster_id),
            cluster_cidr: Some(cc),
            pod_cidrs,
            hosts,
            removed,
        },
    })
}
