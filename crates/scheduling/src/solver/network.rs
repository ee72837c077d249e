//! Network-attached devices in the simulation ([`crate::dra::Dra::network`]): pools of
//! devices many nodes reach (ResourceSlices with `allNodes` or a `nodeSelector`).
//!
//! Before the packing, each pending pod's claims (in the pods' order) are allocated from the
//! network pools, in their order, as Karpenter tries in-cluster devices before an instance
//! type's: a claim whose devices one pool has is allocated there whole and then needs nothing
//! of the node it lands on; its pods carry the pool's node selector (a zoned pool puts them
//! in its zone). A pool's devices are taken for the whole solve, whichever node the pods
//! land on. A claim no pool can serve alone is left to the nodes' devices.

use std::sync::Arc;

use super::source::Taken;
use super::*;
use crate::dra::Dra;

/// Allocates the pending pods' claims that the network pools of `dra` can serve; `network`
/// is each pool's device source.
pub(super) fn allocate(s: &mut Solver, dra: &Dra, network: &[usize]) {
    let Some(state) = s.dra.as_deref() else {
        return;
    };
    if network.is_empty() {
        return;
    }
    let mut taken: Vec<Taken> = network
        .iter()
        .map(|src| state.st.sources[*src].taken.clone())
        .collect();
    // Per interned claim, the pool it is allocated from.
    let mut on: Vec<Option<usize>> = vec![None; state.st.claims.len()];
    let mut pods: Vec<(usize, Vec<usize>)> = Vec::new();
    for (pi, pod) in s.pods.iter().enumerate() {
        let Some(pd) = pod.dra.as_deref().filter(|d| d.blocked.is_none()) else {
            continue;
        };
        let mut pools = Vec::new();
        for &c in &pd.claims {
            let ci = c as usize;
            if on[ci].is_none() && state.st.claims[ci].allocated.is_none() {
                for (k, src) in network.iter().enumerate() {
                    if let Ok(t) = s.allocate(&[c], Some(*src as u32), Some(&taken[k])) {
                        taken[k] = t;
                        on[ci] = Some(k);
                        break;
                    }
                }
            }
            if let Some(k) = on[ci].filter(|k| !pools.contains(k)) {
                pools.push(k);
            }
        }
        if !pools.is_empty() {
            pods.push((pi, pools));
        }
    }
    // Allocated now, on no node in particular: their pods need no device of their node.
    // (The solver's state is not shared yet while it is set up.)
    if let Some(st) = s.dra.as_deref_mut().and_then(|d| Arc::get_mut(&mut d.st)) {
        for (c, k) in on.iter().enumerate() {
            if k.is_some() {
                st.claims[c].allocated = Some(None);
            }
        }
    }
    for (pi, pools) in pods {
        for k in pools {
            for term in &dra.network[k].node_selector {
                let r = s.ireqs(term);
                s.pod_mut(pi).selector_reqs.intersect(&r);
            }
        }
        s.pod_mut(pi).rebuild_reqs();
    }
}
