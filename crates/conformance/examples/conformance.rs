//! Replays recorded Solves of Karpenter's scheduling tests with our solver, checks both
//! results and prints the comparison (docs/conformance.md).
//!
//!     conformance DIR|FILE... [--details FILE] [--pack FILE [--max-types N]]
//!
//! DIR holds `solve-*.json` records (`hack/conformance`) or corpus files. `--details` writes
//! every disagreement and every violation the checker finds in Karpenter's result; `--pack`
//! writes the records as one corpus (instance type lists stored once), keeping records whose
//! NodePools have at most N instance types each (default: all), for `tests/conformance/`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use conformance::{compare, record};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut inputs, mut details, mut pack, mut max_types) = (Vec::new(), None, None, usize::MAX);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--details" => details = args.next().map(PathBuf::from),
            "--pack" => pack = args.next().map(PathBuf::from),
            "--max-types" => max_types = args.next().context("--max-types N")?.parse()?,
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
    if let Some(out) = pack {
        records.retain(|r| {
            r.input
                .instance_types
                .values()
                .all(|v| v.len() <= max_types)
        });
        let n = records.len();
        let corpus = record::Corpus::pack(records);
        std::fs::write(&out, serde_json::to_string(&corpus)?)?;
        eprintln!(
            "packed {n} records ({} instance type sets) into {}",
            corpus.instance_type_sets.len(),
            out.display()
        );
        return Ok(());
    }
    let outcomes: Vec<_> = records.iter().map(compare::compare).collect();
    print!("{}", compare::table(&records, &outcomes));
    if let Some(path) = details {
        std::fs::write(&path, compare::details(&outcomes))?;
    }
    Ok(())
}
