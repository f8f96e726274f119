//! The allocation itself: each host's claim (its node's record, its pin,
//! the state file), collisions settled or disputed, new blocks, and what
//! is frozen.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use ipnet::Ipv4Net;

use super::{AllocError, Allocation, Assignment, Dispute, Frozen, Observed, Source, gateway};
use crate::inventory::{Host, Inventory};
use crate::state::{Known, Removed, STATE_VERSION, State};

fn key(h: &Host) -> String {
    h.name.to_ascii_lowercase()
}

/// A fresh cluster id: 16 hex digits from the clock and the process, enough
/// to tell two clusters of one name apart.
fn new_cluster_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
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

    // The cluster's identity: the state's, else the one the nodes agree on.
    let mut ids: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for h in &inv.hosts {
        if let Some((n, id)) = record(h).and_then(|r| r.cluster.as_ref())
            && n == name
        {
            ids.entry(id.as_str()).or_default().push(&h.name);
        }
    }
    let cluster_id = match (&state.cluster_id, ids.len()) {
        (Some(id), _) => id.clone(),
        // Without asking any node (`check`, `render`) a cluster that has
        // none yet shows this; `up` makes a real one.
        (None, 0) if observed.is_none() => "new".to_string(),
        (None, 0) => new_cluster_id(),
        (None, 1) => {
            let id = ids.keys().next().expect("one id").to_string();
            notes.push(format!(
                "the state file has no cluster id: adopted {id}, which the nodes record"
            ));
            id
        }
        (None, _) => {
            let seen: Vec<String> = ids
                .iter()
                .map(|(id, hosts)| format!("{id} on {}", hosts.join(", ")))
                .collect();
            return Err(AllocError(format!(
                "the nodes record two clusters named {name:?}: {}; kwinctl cannot tell which one this \
                 inventory is. Nothing was changed. Restore this cluster's state file (it names the id), \
                 or reset the nodes that belong to the other cluster",
                seen.join("; ")
            )));
        }
    };

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
            (None, None) => match state.pod_cidrs.get(&key(h)) {
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
    for h in &inv.hosts {
        for (dst, via) in record(h).map(|r| r.routes.as_slice()).unwrap_or(&[]) {
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
    let mut taken: BTreeSet<Ipv4Net> = claims.iter().flatten().map(|c| c.net).collect();
    let odd: Vec<Ipv4Net> = reserved.iter().map(|(n, _)| *n).collect();
    let mut candidates = cc
        .subnets(prefix)
        .map_err(|e| AllocError(format!("cannot split {cc} into /{prefix}: {e}")))?;
    let unknown_names: Vec<&str> = unknown
        .iter()
        .map(|i| inv.hosts[*i].name.as_str())
        .collect();
    for (i, h) in inv.hosts.iter().enumerate() {
        if claims[i].is_some() || disputes.contains_key(&i) || unknown.contains(&i) {
            continue;
        }
        if !unknown.is_empty() {
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
    Ok(Allocation {
        assignments,
        disputes: out_disputes,
        notes,
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
