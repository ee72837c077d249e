//! Replays recorded Solves of Karpenter's scheduling tests with our solver, checks both
//! results and prints the comparison (docs/conformance.md).
//!
//!     conformance DIR|FILE... [--details FILE] [--known FILE]
//!     conformance DIR|FILE... --pack FILE [--max-types N] [--large PREFIX=K]...
//!
//! DIR holds `solve-*.json` records (`hack/conformance`) or corpus files. The comparison exits
//! with status 1 when a disagreement is not excused by (scenario, kind) in the known list
//! (`crates/conformance/known.json`, or `--known FILE`), or when a listed one no longer occurs.
//! `--details` writes every disagreement and every violation the checker finds in Karpenter's
//! result. `--pack` writes the records as one corpus (instance type lists stored once),
//! keeping records whose NodePools have at most N instance types each (default: all) and, per
//! `--large PREFIX=K`, up to K records with larger catalogs whose scenario starts with PREFIX
//! (one Solve per scenario first, in record order), for `tests/conformance/`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use conformance::record::Record;
use conformance::{compare, known, record};

fn main() -> Result<ExitCode> {
    let mut args = std::env::args().skip(1);
    let (mut inputs, mut details, mut pack, mut known_file) = (Vec::new(), None, None, None);
    let (mut max_types, mut large) = (usize::MAX, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--details" => details = args.next().map(PathBuf::from),
            "--known" => known_file = args.next().map(PathBuf::from),
            "--pack" => pack = args.next().map(PathBuf::from),
            "--max-types" => max_types = args.next().context("--max-types N")?.parse()?,
            "--large" => {
                let spec = args.next().context("--large PREFIX=K")?;
                let (prefix, k) = spec.rsplit_once('=').context("--large PREFIX=K")?;
                large.push((prefix.to_string(), k.parse::<usize>()?));
            }
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let mut records = Vec::new();
    for i in &inputs {
        records.extend(if i.is_dir() {
            record::load_dir(i)?
        } else {
            record::load(i)?
        });
    }
    anyhow::ensure!(!records.is_empty(), "no records in {inputs:?}");
    if let Some(out) = pack {
        let records = select(records, max_types, &large);
        let n = records.len();
        let corpus = record::Corpus::pack(records);
        std::fs::write(&out, serde_json::to_string(&corpus)?)?;
        eprintln!(
            "packed {n} records ({} instance type sets) into {}",
            corpus.instance_type_sets.len(),
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let excuses = match &known_file {
        Some(f) => known::load(f)?,
        None => known::builtin()?,
    };
    let outcomes: Vec<_> = records.iter().map(compare::compare).collect();
    print!("{}", compare::table(&records, &outcomes));
    if let Some(path) = details {
        std::fs::write(&path, compare::details(&outcomes))?;
    }
    let verdict = known::judge(&outcomes, &excuses);
    if verdict.passes() {
        return Ok(ExitCode::SUCCESS);
    }
    eprint!("{verdict}");
    Ok(ExitCode::FAILURE)
}

/// The records within `max_types`, plus per `(prefix, k)` up to `k` larger ones of scenarios
/// starting with `prefix`: first one Solve of each such scenario, then further Solves, in
/// record order.
fn select(records: Vec<Record>, max_types: usize, large: &[(String, usize)]) -> Vec<Record> {
    let small = |r: &Record| {
        r.input
            .instance_types
            .values()
            .all(|v| v.len() <= max_types)
    };
    let mut keep: BTreeSet<usize> = (0..records.len()).filter(|&i| small(&records[i])).collect();
    for (prefix, k) in large {
        let candidates: Vec<usize> = (0..records.len())
            .filter(|&i| !keep.contains(&i) && records[i].scenario.starts_with(prefix.as_str()))
            .collect();
        let mut seen = BTreeSet::new();
        let (first, rest): (Vec<usize>, Vec<usize>) = candidates
            .iter()
            .partition(|&&i| seen.insert(records[i].scenario.as_str()));
        keep.extend(first.into_iter().chain(rest).take(*k));
    }
    records
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, r)| r)
        .collect()
}
