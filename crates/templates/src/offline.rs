//! The offline view (`karpenter-capi instance-types`): read YAML files and directories into
//! templates, Clusters and NodeClasses, build each NodeClass's catalog as the operator would,
//! and render it as a table, JSON or YAML.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use api::consts::{groups, labels as label};
use kube::api::DynamicObject;
use serde::Serialize;
use serde_json::Value;

use crate::catalog::build_catalog;
use crate::model::{Catalog, InstanceType};
use crate::quantity::{HumanBytes, format_milli};
use crate::reference::is_machine_template;
pub use crate::selection::selector_matches;
use crate::selection::{Selection, is_opted_in};
use crate::settings::{CatalogSettings, failure_domains_from_cluster_json};

/// Kind of the NodeClass.
pub const NODE_CLASS_KIND: &str = "ClusterAPINodeClass";

/// Why input files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {}invalid YAML: {message}", document.map(|d| format!("document {d}: ")).unwrap_or_default())]
    Yaml {
        path: PathBuf,
        /// 1-based index of the document the error is in, when the parser says where.
        document: Option<usize>,
        message: String,
    },
    #[error("{path}: document {index}: {message}")]
    Object {
        path: PathBuf,
        index: usize,
        message: String,
    },
}

/// Objects read from files, by role.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `infrastructure.cluster.x-k8s.io` `*MachineTemplate` objects.
    pub templates: Vec<DynamicObject>,
    /// `cluster.x-k8s.io` Clusters.
    pub clusters: Vec<DynamicObject>,
    /// ClusterAPINodeClasses.
    pub node_classes: Vec<DynamicObject>,
    /// Other objects, ignored (`kind name` per entry).
    pub ignored: Vec<String>,
    /// The ignored objects themselves, for callers that read more kinds (`simulate`).
    pub others: Vec<Document>,
}

/// One object of a kind the catalog does not read, with where it came from.
#[derive(Debug, Clone)]
pub struct Document {
    pub path: PathBuf,
    /// 1-based index of the document in its file.
    pub index: usize,
    pub object: Value,
}

/// Which document (1-based, counting the non-empty ones as the parser does) holds `line`
/// (1-based): documents are separated by `---` lines.
fn document_of_line(text: &str, line: usize) -> usize {
    let mut document = 0;
    let mut has_content = false;
    for l in text.lines().take(line) {
        let separator = l == "---" || l.starts_with("--- ") || l.starts_with("---\t");
        if separator {
            if has_content {
                document += 1;
            }
            has_content = l.len() > 3 && !l[3..].trim_start().starts_with('#');
        } else if !l.trim().is_empty() && !l.trim_start().starts_with('#') {
            has_content = true;
        }
    }
    document + 1
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl Inputs {
    /// Adds the objects of one YAML (or JSON) text; `path` is only used in errors.
    pub fn add_yaml(&mut self, path: &Path, text: &str) -> Result<(), LoadError> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
            path: path.to_path_buf(),
            document: e
                .location()
                .map(|l| document_of_line(text, usize::try_from(l.line()).unwrap_or(usize::MAX))),
            message: e.to_string(),
        })?;
        for (index, doc) in docs.into_iter().enumerate() {
            self.add_value(path, index + 1, doc)?;
        }
        Ok(())
    }

    fn add_value(&mut self, path: &Path, index: usize, doc: Value) -> Result<(), LoadError> {
        let err = |message: String| LoadError::Object {
            path: path.to_path_buf(),
            index,
            message,
        };
        match &doc {
            Value::Null => return Ok(()),
            Value::Object(_) => {}
            other => return Err(err(format!("expected an object, got {other}"))),
        }
        let api_version = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if kind.ends_with("List")
            && let Some(items) = doc.get("items").and_then(Value::as_array)
        {
            for item in items.clone() {
                self.add_value(path, index, item)?;
            }
            return Ok(());
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let to_obj = |v: Value| -> Result<DynamicObject, LoadError> {
            serde_json::from_value(v).map_err(|e| err(format!("{kind} {name:?}: {e}")))
        };
        if is_machine_template(&api_version, &kind) {
            self.templates.push(to_obj(doc)?);
        } else if kind == "Cluster" && group_of(&api_version) == groups::CLUSTER_API {
            self.clusters.push(to_obj(doc)?);
        } else if kind == NODE_CLASS_KIND {
            self.node_classes.push(to_obj(doc)?);
        } else {
            self.ignored.push(format!("{kind} {name}"));
            self.others.push(Document {
                path: path.to_path_buf(),
                index,
                object: doc,
            });
        }
        Ok(())
    }

    /// Reads files and directories (recursively: `*.yaml`, `*.yml`, `*.json`, in name order);
    /// `-` is standard input.
    pub fn load(paths: &[PathBuf]) -> Result<Self, LoadError> {
        let mut me = Self::default();
        for p in paths {
            if p.as_os_str() == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(
                    |error| LoadError::Io {
                        path: p.clone(),
                        error,
                    },
                )?;
                me.add_yaml(Path::new("<stdin>"), &text)?;
            } else {
                me.load_path(p, true)?;
            }
        }
        Ok(me)
    }

    fn load_path(&mut self, path: &Path, explicit: bool) -> Result<(), LoadError> {
        let io = |error| LoadError::Io {
            path: path.to_path_buf(),
            error,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            for e in entries {
                self.load_path(&e, false)?;
            }
            return Ok(());
        }
        let wanted = explicit
            || matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            );
        if !wanted {
            return Ok(());
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        self.add_yaml(path, &text)
    }
}

/// One NodeClass's catalog as the operator would compute it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogReport {
    /// The NodeClass name; `None` when no NodeClass was given (defaults, all templates).
    pub node_class: Option<String>,
    /// `namespace/name` of the Cluster whose failure domains were used.
    pub cluster: Option<String>,
    /// Templates the NodeClass selects.
    pub templates: usize,
    /// Problems with the inputs themselves (missing Cluster, ...).
    pub warnings: Vec<String>,
    /// The catalog, unless the NodeClass settings are invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<Catalog>,
    /// Why there is no catalog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn obj_json(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

fn ns_name(o: &DynamicObject) -> String {
    format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or("default"),
        o.metadata.name.as_deref().unwrap_or("")
    )
}

/// Builds one report per NodeClass (or one default report when there is none).
///
/// A NodeClass selects the opted-in templates (label `node.cluster.x-k8s.io/karpenter-member`)
/// in its Cluster's namespace (`spec.clusterRef`) that match `spec.machineTemplateSelector`
/// and whose kind is in `spec.machineTemplateKinds` (when set), and uses its `spec.kubelet`
/// and the Cluster's failure domains. Without a NodeClass: every opted-in template, default
/// kubelet settings, the only Cluster's failure domains.
pub fn reports(inputs: &Inputs) -> Vec<CatalogReport> {
    let not_opted_in: Vec<String> = inputs
        .templates
        .iter()
        .filter(|t| !is_opted_in(t))
        .map(|t| t.metadata.name.clone().unwrap_or_default())
        .collect();
    let opt_in_warning = (!not_opted_in.is_empty()).then(|| {
        format!(
            "ignored (no {} label): {}",
            label::KARPENTER_MEMBER,
            not_opted_in.join(", ")
        )
    });
    if inputs.node_classes.is_empty() {
        let mut warnings: Vec<String> = opt_in_warning.iter().cloned().collect();
        let cluster = match inputs.clusters.as_slice() {
            [] => None,
            [c] => Some(c),
            [c, ..] => {
                warnings.push(format!(
                    "{} Clusters and no NodeClass: using the failure domains of {}",
                    inputs.clusters.len(),
                    ns_name(c)
                ));
                Some(c)
            }
        };
        let mut settings = CatalogSettings::default();
        if let Some(c) = cluster {
            settings.failure_domains = failure_domains_from_cluster_json(&obj_json(c));
        }
        let selected: Vec<DynamicObject> = inputs
            .templates
            .iter()
            .filter(|t| Selection::default().matches(t))
            .cloned()
            .collect();
        return vec![report(
            None,
            cluster.map(ns_name),
            &selected,
            &settings,
            warnings,
        )];
    }
    let mut out = Vec::new();
    for nc in &inputs.node_classes {
        let ncv = obj_json(nc);
        let mut warnings: Vec<String> = opt_in_warning.iter().cloned().collect();
        let mut settings = CatalogSettings::from_node_class_json(&ncv);
        let cref_name = ncv.pointer("/spec/clusterRef/name").and_then(Value::as_str);
        let cref_ns = ncv
            .pointer("/spec/clusterRef/namespace")
            .and_then(Value::as_str)
            .or(nc.metadata.namespace.as_deref());
        let cluster = cref_name.and_then(|n| {
            inputs.clusters.iter().find(|c| {
                c.metadata.name.as_deref() == Some(n)
                    && (cref_ns.is_none() || c.metadata.namespace.as_deref() == cref_ns)
            })
        });
        let namespace = cluster
            .and_then(|c| c.metadata.namespace.clone())
            .or(cref_ns.map(str::to_string));
        match (cref_name, cluster) {
            (Some(_), Some(c)) => {
                settings.failure_domains = failure_domains_from_cluster_json(&obj_json(c));
            }
            (Some(n), None) => warnings.push(format!(
                "Cluster {}/{n} (spec.clusterRef) not in the input: no failure domains",
                cref_ns.unwrap_or("?")
            )),
            (None, _) => warnings.push("spec.clusterRef is not set".into()),
        }
        let mut selection = Selection::from_node_class_json(&ncv);
        if namespace.is_some() {
            selection.namespace = namespace;
        }
        let selected: Vec<DynamicObject> = inputs
            .templates
            .iter()
            .filter(|t| selection.matches(t))
            .cloned()
            .collect();
        out.push(report(
            nc.metadata.name.clone(),
            cluster.map(ns_name),
            &selected,
            &settings,
            warnings,
        ));
    }
    out
}

fn report(
    node_class: Option<String>,
    cluster: Option<String>,
    templates: &[DynamicObject],
    settings: &CatalogSettings,
    warnings: Vec<String>,
) -> CatalogReport {
    let (catalog, error) = match build_catalog(templates, settings) {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(format!("NodeClass settings invalid: {e}"))),
    };
    CatalogReport {
        node_class,
        cluster,
        templates: templates.len(),
        warnings,
        catalog,
        error,
    }
}

fn price_range(it: &InstanceType) -> String {
    let prices: Vec<f64> = it.offerings.iter().map(|o| o.price).collect();
    let min = prices.iter().copied().fold(f64::INFINITY, f64::min);
    let max = prices.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if prices.is_empty() {
        "-".into()
    } else if (max - min).abs() < 1e-9 {
        format!("{min:.4}")
    } else {
        format!("{min:.4}-{max:.4}")
    }
}

fn uniq_join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut v: Vec<&str> = Vec::new();
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
    v.sort_unstable();
    v.join(",")
}

/// Renders reports as plain-text tables.
pub fn render_table(reports: &[CatalogReport]) -> String {
    let mut out = String::new();
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "NodeClass: {}   Cluster: {}   templates: {}",
            r.node_class.as_deref().unwrap_or("(none: defaults)"),
            r.cluster.as_deref().unwrap_or("(none)"),
            r.templates
        );
        for w in &r.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        if let Some(e) = &r.error {
            let _ = writeln!(out, "error: {e}");
        }
        let Some(c) = &r.catalog else { continue };
        write_catalog(&mut out, c);
    }
    out
}

/// One catalog: its instance types as a table, then what was excluded and assumed.
fn write_catalog(out: &mut String, c: &Catalog) {
    let header = [
        "NAME",
        "ARCH",
        "OS",
        "CPU",
        "MEMORY",
        "GPU",
        "PODS",
        "ALLOC-CPU",
        "ALLOC-MEMORY",
        "ZONES",
        "CAPACITY-TYPE",
        "PRICE/H",
        "TAINTS",
        "TEMPLATES",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    rows.extend(c.instance_types.iter().map(instance_type_row));
    out.push_str(&columns(&rows));
    if c.instance_types.is_empty() {
        let _ = writeln!(out, "(no instance types)");
    }
    for it in &c.instance_types {
        if let Some(d) = &it.devices {
            let per: Vec<String> = d
                .counts()
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            let _ = writeln!(
                out,
                "devices: {}: {} ({:?})",
                it.name,
                per.join(", "),
                d.source
            );
        }
    }
    for e in &c.excluded {
        let _ = writeln!(
            out,
            "excluded: {}: {}: {}",
            e.template,
            e.error.reason(),
            e.error.detail()
        );
    }
    // Defaults grouped by what was assumed.
    let mut grouped: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for d in &c.defaults_applied {
        grouped
            .entry((d.field.clone(), d.value.clone()))
            .or_default()
            .push(d.template.name.clone());
    }
    for ((field, value), names) in grouped {
        let _ = writeln!(out, "default: {field}={value} for {}", names.join(", "));
    }
}

/// One instance type's row of the table.
fn instance_type_row(it: &InstanceType) -> Vec<String> {
    let label = |k: &str| it.labels.get(k).cloned().unwrap_or_else(|| "-".into());
    let zones = uniq_join(
        it.offerings
            .iter()
            .map(|o| o.zone.as_deref().unwrap_or("-")),
    );
    let cts = uniq_join(it.offerings.iter().map(|o| o.capacity_type.as_str()));
    let taints = if it.taints.is_empty() {
        "-".to_string()
    } else {
        it.taints
            .iter()
            .map(|t| match &t.value {
                Some(v) => format!("{}={}:{}", t.key, v, t.effect),
                None => format!("{}:{}", t.key, t.effect),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let templates = crate::model::templates_of(it)
        .iter()
        .map(|t| format!("{}/{}", t.kind, t.name))
        .collect::<Vec<_>>()
        .join(",");
    let gpu = match it.capacity.gpu_count() {
        0 => "-".to_string(),
        n => n.to_string(),
    };
    vec![
        it.name.clone(),
        label(label::ARCH),
        label(label::OS),
        format_milli(it.capacity.cpu_milli()),
        HumanBytes(it.capacity.memory_bytes()).to_string(),
        gpu,
        it.capacity.pods().to_string(),
        format_milli(it.allocatable.cpu_milli()),
        HumanBytes(it.allocatable.memory_bytes()).to_string(),
        zones,
        cts,
        price_range(it),
        taints,
        templates,
    ]
}

/// Left-aligned columns two spaces apart, one line per row (the first row is the header).
pub fn columns(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for line in column_lines(rows) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The lines of [`columns`], without line ends: one per row, in order (so a caller can put
/// notes between rows).
pub fn column_lines(rows: &[Vec<String>]) -> Vec<String> {
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncols)
        .map(|col| {
            rows.iter()
                .filter_map(|r| r.get(col))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (col, cell) in row.iter().enumerate() {
                if col + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<w$}  ", w = widths[col]);
                }
            }
            line.truncate(line.trim_end().len());
            line
        })
        .collect()
}

/// Renders reports as pretty JSON.
pub fn render_json(reports: &[CatalogReport]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(reports)
}

/// Renders reports as YAML.
pub fn render_yaml(reports: &[CatalogReport]) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_the_document() {
        // A leading separator and a comment-only document do not count, as in the parser.
        let text =
            "# header\n---\nkind: A\n---\n# only a comment\n---\nkind: B\nmetadata: {name: [x\n";
        assert_eq!(document_of_line(text, 3), 1);
        assert_eq!(document_of_line(text, 8), 2);
        let mut inputs = Inputs::default();
        let err = inputs
            .add_yaml(Path::new("f.yaml"), text)
            .expect_err("unclosed bracket");
        assert!(
            err.to_string()
                .starts_with("f.yaml: document 2: invalid YAML: "),
            "{err}"
        );
    }
}
