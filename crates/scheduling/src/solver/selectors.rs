//! The selector sets of a solve's claims evaluated on its device sources (see the `dra` module).
//!
//! CEL sees a device as its driver, attributes and capacity, not its name. Instance types of
//! one shape publish equal devices, as does every GPU of one node, and a node whose driver has
//! not published yet has its type's: so every distinct expression is evaluated once per
//! distinct device as CEL sees it, on a scope with `device` bound once, and each source's
//! matches are read from those outcomes in the order the selectors of a set are ANDed (the
//! first false or failing one decides, as if each device were evaluated on its own).

use std::collections::{BTreeMap, BTreeSet};

use crate::intern::HashMap;

use super::source::Source;
use crate::dra::cel::{Environment, Selector, SelectorError, device_value, literals};
use crate::dra::{Attribute, Quantity};

/// Per selector set, per source: which devices match, or why the source cannot judge.
pub(super) type Matches = Vec<Vec<Result<Vec<bool>, String>>>;

/// A device as CEL sees it: driver, attributes, capacity.
type Seen<'a> = (
    &'a str,
    &'a BTreeMap<String, Attribute>,
    &'a BTreeMap<String, Quantity>,
);

/// Every selector set of `sigs` on every device of `sources`: the matches, and per set why it
/// cannot be evaluated at all (the first such error met), if so.
pub(super) fn evaluate(
    env: &Environment,
    sigs: &[Vec<String>],
    sources: &[Source],
) -> (Matches, Vec<Option<String>>) {
    let mut domains: BTreeSet<String> = BTreeSet::new();
    for e in sigs.iter().flatten() {
        domains.extend(literals(e));
    }
    let root = env.context();
    // Distinct expressions, compiled once; each set as indices into them (one that does not
    // compile has blocked its pods already, see `Builder::claim_data`, and is left out).
    let mut exprs: Vec<Selector> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::default();
    let sets: Vec<Vec<usize>> = sigs
        .iter()
        .map(|set| {
            set.iter()
                .filter_map(|e| {
                    if let Some(&i) = index.get(e.as_str()) {
                        return Some(i);
                    }
                    exprs.push(env.compile(e).ok()?);
                    index.insert(e, exprs.len() - 1);
                    Some(exprs.len() - 1)
                })
                .collect()
        })
        .collect();
    // Per distinct device, every expression's outcome. A failure on the device names the
    // first device evaluated; it is renamed for each device it stands for.
    let mut seen: HashMap<Seen<'_>, usize> = HashMap::default();
    let mut outcomes: Vec<Vec<Result<bool, SelectorError>>> = Vec::new();
    let mut unevaluable: Vec<Option<String>> = vec![None; sigs.len()];
    let mut matches: Matches = vec![Vec::with_capacity(sources.len()); sigs.len()];
    for src in sources {
        let ids: Vec<usize> = src
            .devices
            .iter()
            .map(|(drv, d)| {
                *seen
                    .entry((drv.as_str(), &d.attributes, &d.capacity))
                    .or_insert_with(|| {
                        let scope = env.bind(&root, device_value(drv, d, &domains));
                        let name = format!("{drv}/{}", d.name);
                        outcomes.push(
                            exprs
                                .iter()
                                .map(|sel| env.matches_bound(&scope, sel, &name))
                                .collect(),
                        );
                        outcomes.len() - 1
                    })
            })
            .collect();
        for (sig, set) in sets.iter().enumerate() {
            let mut out: Result<Vec<bool>, String> = Ok(Vec::with_capacity(ids.len()));
            for (&id, (drv, d)) in ids.iter().zip(&src.devices) {
                let mut ok = true;
                for &e in set {
                    match &outcomes[id][e] {
                        Ok(true) => {}
                        Ok(false) => {
                            ok = false;
                            break;
                        }
                        Err(SelectorError::Device {
                            expression, reason, ..
                        }) => {
                            let e = SelectorError::Device {
                                expression: expression.clone(),
                                device: format!("{drv}/{}", d.name),
                                reason: reason.clone(),
                            };
                            out = Err(e.to_string());
                            break;
                        }
                        Err(e) => {
                            unevaluable[sig].get_or_insert(e.to_string());
                            out = Err(e.to_string());
                            break;
                        }
                    }
                }
                match &mut out {
                    Ok(m) => m.push(ok),
                    Err(_) => break,
                }
            }
            matches[sig].push(out);
        }
    }
    (matches, unevaluable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::Device;

    fn device(name: &str, model: Option<&str>, memory: i64) -> (String, Device) {
        let mut d = Device::named(name);
        if let Some(m) = model {
            d.attributes
                .insert("model".into(), Attribute::String(m.into()));
        }
        d.capacity
            .insert("memory".into(), Quantity::from_units(memory));
        ("gpu.example.com".into(), d)
    }

    fn source(devices: Vec<(String, Device)>) -> Source {
        let taken = super::super::source::Taken::none(devices.len());
        let draws = vec![Vec::new(); devices.len()];
        Source {
            devices,
            taken,
            budgets: Vec::new(),
            draws,
        }
    }

    /// The matches and unevaluable reasons of `sigs` on `sources`, each device evaluated on
    /// its own (the definition the shared outcomes must agree with).
    fn one_by_one(
        env: &Environment,
        sigs: &[Vec<String>],
        sources: &[Source],
    ) -> (Matches, Vec<Option<String>>) {
        let mut domains = BTreeSet::new();
        for e in sigs.iter().flatten() {
            domains.extend(literals(e));
        }
        let root = env.context();
        let mut unevaluable = vec![None; sigs.len()];
        let mut matches: Matches = vec![Vec::new(); sigs.len()];
        for src in sources {
            for (sig, set) in sigs.iter().enumerate() {
                let sels: Vec<Selector> = set.iter().filter_map(|e| env.compile(e).ok()).collect();
                let mut out: Result<Vec<bool>, String> = Ok(Vec::new());
                for (drv, d) in &src.devices {
                    let v = device_value(drv, d, &domains);
                    let mut ok = true;
                    for sel in &sels {
                        match env.matches(&root, sel, &v, &format!("{drv}/{}", d.name)) {
                            Ok(true) => {}
                            Ok(false) => {
                                ok = false;
                                break;
                            }
                            Err(e @ SelectorError::Device { .. }) => {
                                out = Err(e.to_string());
                                break;
                            }
                            Err(e) => {
                                unevaluable[sig].get_or_insert(e.to_string());
                                out = Err(e.to_string());
                                break;
                            }
                        }
                    }
                    match &mut out {
                        Ok(m) => m.push(ok),
                        Err(_) => break,
                    }
                }
                matches[sig].push(out);
            }
        }
        (matches, unevaluable)
    }

    #[test]
    fn shared_outcomes_match_per_device_evaluation() {
        let env = Environment::new();
        let by_model = r#"device.attributes["gpu.example.com"].model == "b""#;
        let big = r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("80")) >= 0"#;
        let driver = r#"device.driver == "gpu.example.com""#;
        let sigs = vec![
            vec![driver.to_string()],
            vec![driver.to_string(), by_model.to_string()],
            vec![driver.to_string(), big.to_string()],
            vec![by_model.to_string(), big.to_string()],
        ];
        // Equal devices under other names and in other sources, and one without the
        // attribute the model selector reads (it fails on that device).
        let sources = vec![
            source(vec![
                device("gpu-0", Some("a"), 40),
                device("gpu-1", Some("b"), 80),
            ]),
            source(vec![
                device("gpu-0", Some("b"), 80),
                device("gpu-1", Some("a"), 40),
            ]),
            source(vec![device("x", Some("b"), 40), device("y", Some("b"), 80)]),
            source(vec![
                device("gpu-0", Some("a"), 80),
                device("bare", None, 80),
            ]),
        ];
        let (matches, unevaluable) = evaluate(&env, &sigs, &sources);
        assert_eq!(
            (matches.clone(), unevaluable.clone()),
            one_by_one(&env, &sigs, &sources)
        );
        // Positive control: the model selector picks the "b" device wherever it is.
        assert_eq!(matches[1][0], Ok(vec![false, true]));
        assert_eq!(matches[1][1], Ok(vec![true, false]));
        assert_eq!(matches[1][2], Ok(vec![true, true]));
        assert_eq!(matches[2][2], Ok(vec![false, true]));
        assert_eq!(matches[3][1], Ok(vec![true, false]));
        // The failure names the device that lacks the attribute, not the first one seen.
        let Err(why) = &matches[1][3] else {
            panic!("{:?}", matches[1][3]);
        };
        assert!(why.contains("gpu.example.com/bare"), "{why}");
        // The driver alone judges every device, the attribute missing or not.
        assert_eq!(matches[0][3], Ok(vec![true, true]));
        assert_eq!(unevaluable, vec![None; 4]);
    }

    #[test]
    fn an_unevaluable_selector_is_reported_for_its_sets_only() {
        let env = Environment::new();
        let not_bool = r#"device.driver + "x""#;
        let driver = r#"device.driver == "gpu.example.com""#;
        let sigs = vec![
            vec![driver.to_string(), not_bool.to_string()],
            vec![driver.to_string()],
        ];
        let sources = vec![
            source(vec![device("gpu-0", Some("a"), 40)]),
            source(vec![
                device("gpu-0", Some("a"), 40),
                device("gpu-1", Some("a"), 40),
            ]),
        ];
        let (matches, unevaluable) = evaluate(&env, &sigs, &sources);
        assert_eq!(
            (matches.clone(), unevaluable.clone()),
            one_by_one(&env, &sigs, &sources)
        );
        assert!(
            unevaluable[0]
                .as_deref()
                .is_some_and(|w| w.contains("not a bool")),
            "{unevaluable:?}"
        );
        assert_eq!(unevaluable[1], None);
        assert_eq!(matches[1], vec![Ok(vec![true]), Ok(vec![true, true])]);
    }
}
