//! The pending pods' setup ([`pod_data`]), on two threads in a large solve: this thread sets
//! up the first half while the worker ([`helper`]) sets up the second on a copy of the solver
//! as it stands before the pods, then the second half is merged in, exactly as the setup of
//! every pod in order on one thread would have left the solver.
//!
//! Setting up a pod interns its names and makes its topology groups; nothing else it writes
//! is shared. The copy starts with every name and group made so far: the worker's new names
//! and groups are those its half meets that were not there yet, in the order it first meets
//! them. The merge interns those names here in that order: the first half's own names keep
//! their ids, the rest get the next ones, as when the second half's pods come after the
//! first's. Groups likewise (a group the first half made is found in the index). Then the
//! second half's ids and group indices are rewritten to these, and each set of ids sorted
//! again (an id may now sort before another it followed).

use super::groups::pod_data;
use super::helper;
use super::topology::{Group, GroupKey};
use super::*;

/// Pods from which the second half is set up on the worker: below, a thread's wake-up and
/// the merge cost about what they save.
pub(super) const SPLIT_PODS: usize = 512;

/// Sets up `input`'s pods into `s.pods` (input order), on two threads from `split` pods;
/// whether the worker set up the second half.
pub(super) fn setup(
    s: &mut Solver,
    gindex: &mut HashMap<GroupKey, usize>,
    input: &Input,
    vols: &super::volumes::VolIndex,
    split: usize,
) -> bool {
    let pods_id = res_index(&mut s.res_names, PODS);
    let n = input.pods.len();
    let with_vols = |mut pd: PodData| {
        pd.vols = vols.pods.get(pd.input).cloned().unwrap_or_default();
        Arc::new(pd)
    };
    let one = |s: &mut Solver, gindex: &mut HashMap<GroupKey, usize>, pi: usize| {
        pod_data(s, gindex, pods_id, pi, &input.pods[pi])
    };
    // Pods `range` set up here, in order.
    let here = |s: &mut Solver, gindex: &mut HashMap<GroupKey, usize>, range| {
        for pi in range {
            let pd = one(s, gindex, pi);
            s.pods.push(with_vols(pd));
        }
    };
    s.pods.reserve(n);
    if n < split {
        here(s, gindex, 0..n);
        return false;
    }
    let half = n / 2;
    let mut copy = Some((s.clone(), gindex.clone()));
    let before = (s.names.len(), s.groups.len());
    let (_, second) = helper::beside(
        || {
            let (mut w, mut windex) = copy.take()?;
            let pods: Vec<PodData> = (half..n).map(|pi| one(&mut w, &mut windex, pi)).collect();
            Some((w.names, w.groups, pods))
        },
        || here(s, gindex, 0..half),
    );
    match second.flatten() {
        Some((names, groups, pods)) => {
            let map = merge(s, gindex, before, &names, groups);
            for mut pd in pods {
                map.pod(&mut pd);
                s.pods.push(with_vols(pd));
            }
            true
        }
        // No worker to be had: the second half here, after the first.
        None => {
            here(s, gindex, half..n);
            false
        }
    }
}

/// The worker's ids and group indices as the merge made them.
struct Map {
    /// Per worker name id, the symbol here.
    syms: Vec<Sym>,
    /// Per worker group index, the index here.
    groups: Vec<usize>,
}

/// Interns the worker's new names and adds its new groups (each in the order the worker made
/// them); `before` is the names and groups the worker's copy started with.
fn merge(
    s: &mut Solver,
    gindex: &mut HashMap<GroupKey, usize>,
    before: (usize, usize),
    names: &Interner,
    groups: Vec<Group>,
) -> Map {
    let syms = (0..names.len() as u32)
        .map(|id| {
            if (id as usize) < before.0 {
                names.sym_of(id)
            } else {
                s.names.sym(names.name(id))
            }
        })
        .collect();
    let mut map = Map {
        syms,
        groups: (0..before.1).collect(),
    };
    for mut g in groups.into_iter().skip(before.1) {
        map.group(&mut g);
        let key = g.group_key();
        let at = match gindex.get(&key) {
            Some(&at) => at,
            None => {
                s.groups.push(g);
                gindex.insert(key, s.groups.len() - 1);
                s.groups.len() - 1
            }
        };
        map.groups.push(at);
    }
    map
}

impl Map {
    fn key(&self, k: Key) -> Key {
        self.syms.get(k as usize).map_or(k, |s| s.id)
    }

    fn sym(&self, v: Sym) -> Sym {
        self.syms.get(v.id as usize).copied().unwrap_or(v)
    }

    fn labels(&self, labels: &mut [(Key, Sym)]) {
        for (k, v) in labels.iter_mut() {
            (*k, *v) = (self.key(*k), self.sym(*v));
        }
        labels.sort();
    }

    fn reqs(&self, r: &mut IReqs) {
        r.remap(|k| self.key(*k), |v| self.sym(*v));
    }

    /// A new group's names (its counts are still empty).
    fn group(&self, g: &mut Group) {
        g.key = self.key(g.key);
        for ns in &mut g.namespaces {
            *ns = self.key(*ns);
        }
        g.namespaces.sort();
        self.labels(&mut g.selector.labels);
        self.reqs(&mut g.selector.exprs);
        for r in &mut g.filter.affinity {
            self.reqs(r);
        }
    }

    /// A pod of the worker's half: its names, its groups, then its requirements made again.
    fn pod(&self, pd: &mut PodData) {
        pd.ns = self.key(pd.ns);
        self.labels(&mut pd.labels);
        self.reqs(&mut pd.selector_reqs);
        let terms = (pd.required_terms.iter_mut())
            .chain(pd.preferred_terms.iter_mut())
            .chain(pd.vol_alts.iter_mut());
        for r in terms {
            self.reqs(r);
        }
        let group = |g: &mut usize| *g = self.groups.get(*g).copied().unwrap_or(*g);
        pd.spreads.iter_mut().for_each(|(g, _)| group(g));
        let lists = (pd.affinity.iter_mut())
            .chain(pd.anti.iter_mut())
            .chain(pd.pref_affinity.iter_mut())
            .chain(pd.pref_anti.iter_mut());
        lists.for_each(group);
        pd.rebuild_reqs();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_workload::{input, input_with_volumes};

    /// Everything the pods' setup writes, as one comparable value per part.
    fn setup_of(s: &Solver) -> (Vec<String>, Vec<String>, Vec<String>) {
        let names = (0..s.names.len() as u32)
            .map(|id| s.names.name(id).to_string())
            .collect();
        let groups = (s.groups.iter())
            .map(|g| format!("{:?} {} {:?}", g.kind, g.host, hash_of(&g.group_key())))
            .collect();
        let pods = (s.pods.iter())
            .map(|p| {
                format!(
                    "{} {:?} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    p.input,
                    p.requests,
                    p.ns,
                    p.labels,
                    p.selector_reqs,
                    p.required_terms,
                    p.preferred_terms,
                    p.vol_alts,
                    p.reqs,
                    p.strict_reqs,
                    p.spreads,
                    p.affinity,
                    p.anti,
                    p.pref_affinity,
                    p.pref_anti,
                    p.vols,
                    p.matched,
                    p.repelled,
                )
            })
            .collect();
        (names, groups, pods)
    }

    /// Groups have no `Debug`: their key's hash under a fixed hasher stands for it.
    fn hash_of(k: &GroupKey) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(k)
    }

    /// `inp`'s second half brings names and groups of its own, and repeats the first's.
    fn with_a_second_half_of_its_own(mut inp: Input) -> Input {
        let n = inp.pods.len();
        for (i, p) in inp.pods.iter_mut().enumerate().skip(n / 2) {
            // New names that sort before the first half's, and numbers (`Gt`).
            p.labels.insert("aaa-late".into(), format!("v{}", i % 7));
            p.node_selector.insert("a-late-key".into(), "0-late".into());
            p.required_node_affinity = vec![vec![
                Requirement::new("late-size", Operator::Gt, &[&format!("{}", i % 5)]),
                Requirement::new(LABEL_ZONE, Operator::In, &["test-zone-2", "late-zone"]),
            ]];
            if i % 3 == 0 {
                let mut t = (p.pod_anti_affinity.first().cloned()).unwrap_or_else(|| {
                    PodAffinityTerm::new(LABEL_HOSTNAME, LabelSelector::labels(&[]))
                });
                t.namespaces = vec!["late-ns".into(), "default".into()];
                t.selector
                    .match_labels
                    .insert("aaa-late".into(), "v1".into());
                p.pod_anti_affinity.push(t);
            }
        }
        inp
    }

    #[test]
    fn two_threads_set_the_pods_up_as_one_does() {
        let dra = crate::dra::Dra::default();
        for (what, inp) in [
            ("diverse", input(600)),
            ("volumes", input_with_volumes(600)),
            (
                "a second half of its own",
                with_a_second_half_of_its_own(input(600)),
            ),
        ] {
            let (one, split) = build::build_split(&inp, &dra, usize::MAX);
            assert!(!split, "{what}");
            let (mut two, mut split) = build::build_split(&inp, &dra, 2);
            // Other tests' solves may hold the worker a while.
            for _ in 0..2000 {
                if split {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
                (two, split) = build::build_split(&inp, &dra, 2);
            }
            assert!(split, "{what}: the worker set up the second half");
            let (a, b) = (setup_of(&one), setup_of(&two));
            assert_eq!(a.0, b.0, "{what}: names and their ids");
            assert_eq!(a.1, b.1, "{what}: groups");
            assert_eq!(a.2.len(), inp.pods.len());
            for (i, (x, y)) in a.2.iter().zip(&b.2).enumerate() {
                assert_eq!(x, y, "{what}: pod {i}");
            }
        }
        // The second half's own names come after the first's, in the order it meets them.
        let inp = with_a_second_half_of_its_own(input(600));
        let (two, _) = build::build_split(&inp, &dra, 2);
        let names = setup_of(&two).0;
        let at = |n: &str| names.iter().position(|x| x == n);
        assert!(at("aaa-late") > at("my-label"), "{names:?}");
        assert!(at("late-ns").is_some() && at("late-zone").is_some());
    }
}
