//! Our solver on exactly the input Karpenter's scheduler was timed on, side by side.
//!
//!     vs_karpenter DIR SIZE...
//!
//! DIR holds, per size, what `hack/bench/go/schedbench` wrote: `input-<n>.json` (Karpenter's
//! fake instance types and the pods of its scheduling benchmark, as Kubernetes JSON) and
//! `karpenter-<n>.json` (its times, NodeClaims, total price, pod errors), and the same per
//! further catalog (`input-<catalog>-<n>.json`, ...; one row each when present). The pods go
//! through the operator's own conversion (`provisioning::convert::pod`), then `solve` is timed
//! by the rule schedbench times Karpenter's side with, that of Go's `testing.Benchmark`
//! ([`measure`]): the mean of the last batch, which lasts at least a second. `Karpenter s` is
//! its set-up from the pods (NewTopology, NewScheduler) and Solve, as our `solve` starts from
//! the raw input too; `Karpenter Solve s` its Solve alone; `first run` each side's first, cold,
//! run. Price: per NodeClaim, the cheapest available compatible offering, summed (Karpenter's
//! fake price, 0.1×cpu + 0.1×memory bytes/1e9, or the catalog's); `ours/K` is our price over
//! Karpenter's; `ours first-fit` is our first-fit packing alone (`solve_first_fit`, timed
//! the same way after `solve`), what the price-aware plan is compared with.
//! `hack/bench/scheduling.sh` drives this.
//!
//! Exits non-zero (after the whole table) when our solver leaves more pods unschedulable than
//! Karpenter's did on the same input: those are pods a scheduler places, and we do not.

use std::time::Instant;

/// The operator's allocator, with its options (`karpenter_core::memory::CONF`): our
/// solve is timed as the operator runs it.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&u8> = Some(&karpenter_core::memory::CONF[0]);

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use api::karpenter::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_core::model::convert;
use scheduling::{Input, InstanceType, NodePool, Offering};
use serde_json::Value;

fn read(path: &std::path::Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `v` as a typed object (`null` is the default).
fn typed<T: serde::de::DeserializeOwned + Default>(v: &Value, what: &str) -> Result<T> {
    if v.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(v.clone()).with_context(|| format!("reading {what}"))
}

fn instance_type(v: &Value) -> Result<InstanceType> {
    let requirements: Vec<NodeSelectorRequirementWithMinValues> =
        typed(&v["requirements"], "requirements")?;
    let resources = |k: &str| -> Result<scheduling::Resources> {
        Ok(convert::resources(&typed::<BTreeMap<String, Quantity>>(
            &v[k], k,
        )?))
    };
    Ok(InstanceType {
        volume_limits: Default::default(),
        name: v["name"].as_str().unwrap_or_default().to_string(),
        requirements: convert::requirements(&requirements),
        capacity: resources("capacity")?,
        overhead: resources("overhead")?,
        offerings: v["offerings"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|o| Offering {
                zone: o["zone"].as_str().unwrap_or_default().to_string(),
                capacity_type: o["capacityType"].as_str().unwrap_or_default().to_string(),
                price: o["price"].as_f64().unwrap_or(f64::MAX),
                available: o["available"].as_bool().unwrap_or(false),
                count: None,
            })
            .collect(),
        taints: Vec::new(),
    })
}

fn input(v: &Value) -> Result<Input> {
    let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    let types = list("instanceTypes")
        .iter()
        .map(instance_type)
        .collect::<Result<_>>()?;
    let pods = list("pods")
        .iter()
        .map(|p| Ok(convert::pod(&typed::<Pod>(p, "pod")?)))
        .collect::<Result<_>>()?;
    Ok(Input {
        node_pools: vec![NodePool::new("default", types)],
        nodes: Vec::new(),
        daemonsets: Vec::new(),
        pods,
        min_values_policy: Default::default(),
    })
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        bail!("usage: vs_karpenter DIR SIZE...")
    };
    let dir = std::path::PathBuf::from(dir);
    let sizes: Vec<usize> = args
        .map(|a| a.parse().with_context(|| format!("size {a}")))
        .collect::<Result<_>>()?;
    println!(
        "| catalog | pods | Karpenter s | ours s | Karpenter/ours | Karpenter Solve s | first run K / ours s | ours first-fit s | NodeClaims K / ours | price K / ours | ours/K | ours first-fit | unschedulable K / ours |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut failures = Vec::new();
    for n in sizes {
        for catalog in CATALOGS {
            if let Err(e) = row(&dir, catalog, n)? {
                failures.push(e);
            }
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Times `run` as Go's `testing.Benchmark` times a benchmark body (`src/testing/benchmark.go`,
/// `launch` and `predictN`; schedbench's `measure` times Karpenter's side so): one run, then
/// batches grown toward one second (1.2× the predicted count, at most 100× and at least one
/// more than the last) until a batch lasts a second. Returns the first run's output, its
/// seconds, and the last batch's mean seconds.
fn measure<T>(mut run: impl FnMut() -> T) -> (T, f64, f64) {
    let t = Instant::now();
    let first = run();
    let cold = t.elapsed().as_secs_f64();
    let (mut n, mut total) = (1u64, cold);
    while total < 1.0 && n < 1_000_000_000 {
        let predicted = (1.0 * n as f64 / total.max(1e-9)) as u64;
        n = (predicted + predicted / 5).min(100 * n).max(n + 1);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(run());
        }
        total = t.elapsed().as_secs_f64();
    }
    (first, cold, total / n as f64)
}

/// Our solver leaves no more pods unschedulable than Karpenter's did on the same `n` pods.
fn placed_as_karpenter(what: &str, karpenter: &Value, ours: usize) -> Result<(), String> {
    let Some(karpenter) = karpenter.as_u64() else {
        return Err(format!("{what}: Karpenter's result has no podErrors count"));
    };
    if ours as u64 > karpenter {
        return Err(format!(
            "{what}: our solver left {ours} pods unschedulable, Karpenter's {karpenter}"
        ));
    }
    Ok(())
}

/// The catalogs `schedbench -catalogs` writes; "karpenter" has no file prefix.
const CATALOGS: [&str; 4] = ["karpenter", "bare-metal", "resizable", "overlay"];

/// One table row: catalog `catalog` at `n` pods, when schedbench wrote it; `Err` inside when
/// our solver left pods unschedulable that Karpenter's placed.
fn row(dir: &std::path::Path, catalog: &str, n: usize) -> Result<Result<(), String>> {
    let prefix = match catalog {
        "karpenter" => String::new(),
        c => format!("{c}-"),
    };
    let kpath = dir.join(format!("karpenter-{prefix}{n}.json"));
    if !kpath.exists() {
        return Ok(Ok(()));
    }
    let k = read(&kpath)?;
    let inp = input(&read(&dir.join(format!("input-{prefix}{n}.json")))?)?;
    if inp.pods.len() != n {
        bail!("input-{prefix}{n}.json holds {} pods", inp.pods.len());
    }
    let (out, cold, ours) = measure(|| scheduling::solve(&inp));
    let (first_fit, _, first_fit_s) = measure(|| scheduling::solve_first_fit(&inp));
    let price = out.price();
    let kprice = k["price"].as_f64().unwrap_or(f64::NAN);
    let seconds = |f: &str| k[f].as_f64().unwrap_or(f64::NAN);
    let (ks, ksolve, kcold) = (
        seconds("seconds"),
        seconds("solveSeconds"),
        seconds("coldSeconds"),
    );
    println!(
        "| {catalog} | {n} | {ks:.3} | {ours:.4} | {:.0}× | {ksolve:.3} | {kcold:.3} / {cold:.4} | {first_fit_s:.4} | {} / {} | {kprice:.2} / {price:.2} | {:.3} | {:.2} | {} / {} |",
        ks / ours,
        k["nodeClaims"],
        out.new_node_claims.len(),
        price / kprice,
        first_fit.price(),
        k["podErrors"],
        out.unschedulable.len(),
    );
    Ok(placed_as_karpenter(
        &format!("{catalog}, {n} pods"),
        &k["podErrors"],
        out.unschedulable.len(),
    ))
}
