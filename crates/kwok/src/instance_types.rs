//! Karpenter kwok's instance-type file (`INSTANCE_TYPES_FILE_PATH`, `kwok/cloudprovider/
//! helpers.go`): a JSON array of
//! `{"name", "architecture", "operatingSystems": [..], "resources": {ResourceList},
//! "offerings": [{"Price", "Available", "ReservationCapacity", "Requirements": [{"key",
//! "operator", "values"}]}]}` (and, ours, an optional `"volumeLimits": {"<CSI driver>": N}`),
//! read from a file or a ConfigMap key, with Karpenter's defaults:
//! `pods: 110` unless given, every offering available, the four `karpenter.kwok.sh/instance-*`
//! labels derived from the name and resources, and 100m CPU / 10Mi memory kube-reserved.
//! Every error names where (file or ConfigMap) and which field.

use std::collections::BTreeMap;
use std::path::Path;

use api::consts::labels as label;
use cloudprovider::Resources;
use cloudprovider::quantity::{parse_milli, parse_value};
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;

use crate::Error;
use crate::labels;

/// The ConfigMap key the instance types are read from unless told otherwise.
pub const CONFIG_MAP_KEY: &str = "instance-types.json";

/// Kube-reserved on every kwok instance type (Karpenter kwok's overhead).
const KUBE_RESERVED_CPU_MILLI: i64 = 100;
const KUBE_RESERVED_MEMORY: i64 = 10 << 20;
/// Pods per Node unless the file says.
const DEFAULT_PODS: i64 = 110;

/// An instance type kwok can make a Node of.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    /// `node.kubernetes.io/instance-type`.
    pub name: String,
    /// Labels every Node of this type carries: instance type, arch, os (when one), and the
    /// `karpenter.kwok.sh/instance-{size,family,cpu,memory}` labels.
    pub labels: BTreeMap<String, String>,
    pub capacity: Resources,
    /// Capacity less kube-reserved.
    pub allocatable: Resources,
    pub offerings: Vec<Offering>,
    /// Attach limits per CSI driver (the optional `volumeLimits` map; a driver with `0` or
    /// not listed is unlimited).
    pub volume_limits: BTreeMap<String, u32>,
}

/// One way to get an instance type: its single-valued requirements (zone, capacity type,
/// any other key) as labels, and a price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    pub price: f64,
    /// Always true once read (Karpenter kwok forces it).
    pub available: bool,
    pub reservation_capacity: i64,
    pub labels: BTreeMap<String, String>,
}

impl Offering {
    pub fn zone(&self) -> Option<&str> {
        self.labels.get(label::ZONE).map(String::as_str)
    }

    pub fn capacity_type(&self) -> &str {
        self.labels
            .get(label::CAPACITY_TYPE)
            .map_or(label::CAPACITY_TYPE_ON_DEMAND, String::as_str)
    }
}

/// Reads the instance types of a file.
pub fn read_file(path: &Path) -> Result<Vec<InstanceType>, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes, &path.display().to_string())
}

/// Reads the instance types of a ConfigMap's `key` (`data`, else `binaryData`).
pub fn from_config_map(cm: &ConfigMap, key: &str) -> Result<Vec<InstanceType>, Error> {
    let source = format!(
        "ConfigMap {}/{} key {key}",
        cm.metadata.namespace.as_deref().unwrap_or(""),
        cm.metadata.name.as_deref().unwrap_or("")
    );
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(String::as_bytes);
    let binary = cm
        .binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice());
    match text.or(binary) {
        Some(bytes) => parse(bytes, &source),
        None => Err(Error::InstanceTypes {
            origin: source,
            field: String::new(),
            message: "no such key".into(),
        }),
    }
}

// --- the file's format (Go's encoding/json matches field names case-insensitively; the
// spellings Karpenter writes, and their other common casing, are accepted) ---------------

#[derive(Deserialize)]
struct InstanceTypeOptions {
    #[serde(default, alias = "Name")]
    name: String,
    #[serde(default, alias = "Offerings")]
    offerings: Vec<OfferingOptions>,
    #[serde(default, alias = "Architecture")]
    architecture: String,
    #[serde(default, rename = "operatingSystems", alias = "OperatingSystems")]
    operating_systems: Vec<String>,
    #[serde(default, alias = "Resources")]
    resources: BTreeMap<String, QuantityValue>,
    /// Ours (not Karpenter kwok's): attach limits per CSI driver, `0` for none.
    #[serde(default, rename = "volumeLimits", alias = "VolumeLimits")]
    volume_limits: BTreeMap<String, u32>,
}

#[derive(Deserialize)]
struct OfferingOptions {
    #[serde(default, rename = "Price", alias = "price")]
    price: f64,
    #[serde(default, rename = "ReservationCapacity", alias = "reservationCapacity")]
    reservation_capacity: i64,
    #[serde(default, rename = "Requirements", alias = "requirements")]
    requirements: Vec<RequirementOptions>,
    /// Read and ignored: every offering is available (as in Karpenter kwok).
    #[serde(default, rename = "Available", alias = "available")]
    _available: bool,
    /// Not supported: refused rather than silently ignored.
    #[serde(default, rename = "CapacityOverride", alias = "capacityOverride")]
    capacity_override: Option<serde_json::Value>,
    #[serde(default, rename = "OverheadOverride", alias = "overheadOverride")]
    overhead_override: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RequirementOptions {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

/// A resource quantity: a string (`"4Gi"`) or a JSON number, as Go's `resource.Quantity`
/// reads it.
#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityValue {
    Text(String),
    Number(serde_json::Number),
}

impl QuantityValue {
    fn text(&self) -> String {
        match self {
            QuantityValue::Text(s) => s.clone(),
            QuantityValue::Number(n) => n.to_string(),
        }
    }
}

/// Parses the instance types of `bytes`; `source` names the file or ConfigMap in errors.
pub fn parse(bytes: &[u8], source: &str) -> Result<Vec<InstanceType>, Error> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let options: Vec<InstanceTypeOptions> =
        serde_path_to_error::deserialize(de).map_err(|e| Error::InstanceTypes {
            origin: source.to_string(),
            // serde_path_to_error names the document itself ".".
            field: Some(e.path().to_string())
                .filter(|p| p != ".")
                .unwrap_or_default(),
            message: e.inner().to_string(),
        })?;
    let bad = |field: String, message: String| Error::InstanceTypes {
        origin: source.to_string(),
        field,
        message,
    };
    let mut out: Vec<InstanceType> = Vec::with_capacity(options.len());
    for (i, o) in options.into_iter().enumerate() {
        if o.name.is_empty() {
            return Err(bad(format!("[{i}].name"), "missing or empty".into()));
        }
        if out.iter().any(|t| t.name == o.name) {
            return Err(bad(
                format!("[{i}].name"),
                format!("instance type {:?} is listed twice", o.name),
            ));
        }
        out.push(instance_type(o, i).map_err(|(field, message)| bad(field, message))?);
    }
    Ok(out)
}

type FieldError = (String, String);

fn instance_type(o: InstanceTypeOptions, i: usize) -> Result<InstanceType, FieldError> {
    let mut capacity = BTreeMap::new();
    let mut written = BTreeMap::new();
    for (name, q) in &o.resources {
        let text = q.text();
        let v = if name == Resources::CPU {
            parse_milli(&text)
        } else {
            parse_value(&text)
        }
        .map_err(|e| (format!("[{i}].resources.{name}"), e.to_string()))?;
        capacity.insert(name.clone(), v);
        written.insert(name.clone(), text);
    }
    capacity
        .entry(Resources::PODS.to_string())
        .or_insert(DEFAULT_PODS);
    let capacity = Resources(capacity);
    let mut allocatable = capacity.clone();
    for (name, reserved) in [
        (Resources::CPU, KUBE_RESERVED_CPU_MILLI),
        (Resources::MEMORY, KUBE_RESERVED_MEMORY),
    ] {
        if let Some(v) = allocatable.0.get_mut(name) {
            *v = (*v - reserved).max(0);
        }
    }
    let cpu = written
        .get(Resources::CPU)
        .map_or(String::new(), |_| capacity.quantity(Resources::CPU));
    let memory = written
        .get(Resources::MEMORY)
        .map_or(String::new(), |_| capacity.quantity(Resources::MEMORY));
    let mut labels = BTreeMap::from([
        (label::INSTANCE_TYPE.to_string(), o.name.clone()),
        (labels::INSTANCE_SIZE.to_string(), size_of(&o.name, &cpu)),
        (labels::INSTANCE_FAMILY.to_string(), family_of(&o.name)),
        (labels::INSTANCE_CPU.to_string(), cpu),
        (labels::INSTANCE_MEMORY.to_string(), memory),
    ]);
    if !o.architecture.is_empty() {
        labels.insert(label::ARCH.to_string(), o.architecture.clone());
    }
    if let [os] = o.operating_systems.as_slice() {
        labels.insert(label::OS.to_string(), os.clone());
    }
    let offerings = o
        .offerings
        .into_iter()
        .enumerate()
        .map(|(j, off)| offering(off, &format!("[{i}].offerings[{j}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(InstanceType {
        name: o.name,
        labels,
        capacity,
        allocatable,
        offerings,
        volume_limits: o
            .volume_limits
            .into_iter()
            .filter(|(_, l)| *l > 0)
            .collect(),
    })
}

fn offering(o: OfferingOptions, at: &str) -> Result<Offering, FieldError> {
    if o.capacity_override.is_some() || o.overhead_override.is_some() {
        return Err((
            format!("{at}.CapacityOverride"),
            "capacity and overhead overrides are not supported".into(),
        ));
    }
    if !o.price.is_finite() || o.price < 0.0 {
        return Err((format!("{at}.Price"), format!("{} is not a price", o.price)));
    }
    let mut labels = BTreeMap::new();
    for (k, r) in o.requirements.into_iter().enumerate() {
        let field = format!("{at}.Requirements[{k}]");
        if r.key.is_empty() {
            return Err((format!("{field}.key"), "missing or empty".into()));
        }
        match (r.operator.as_str(), r.values.as_slice()) {
            ("In", [value]) => {
                labels.insert(r.key, value.clone());
            }
            (op, values) => {
                return Err((
                    field,
                    format!(
                        "{} {op} {values:?}: an offering requirement must be `In` with one value",
                        r.key
                    ),
                ));
            }
        }
    }
    Ok(Offering {
        price: o.price,
        available: true,
        reservation_capacity: o.reservation_capacity,
        labels,
    })
}

/// `karpenter.kwok.sh/instance-size`: the AWS size of `family.size` names
/// (`nano|micro|small|medium|large|<n>xlarge|metal`), else the CPU count.
fn size_of(name: &str, cpu: &str) -> String {
    let aws = name.split_once('.').and_then(|(family, size)| {
        let word = !family.is_empty()
            && family
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        let digits = size
            .strip_suffix("xlarge")
            .map(|n| n.chars().all(|c| c.is_ascii_digit()));
        let known = matches!(
            size,
            "nano" | "micro" | "small" | "medium" | "large" | "metal"
        );
        (word && (known || digits == Some(true))).then(|| size.to_string())
    });
    aws.unwrap_or_else(|| cpu.to_string())
}

/// `karpenter.kwok.sh/instance-family`: what precedes the first `.` or `-`, else the first
/// character.
fn family_of(name: &str) -> String {
    match name.split_once(['.', '-']) {
        Some((family, _)) => family.to_string(),
        None => name.chars().take(1).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BENCH: &str = include_str!("../../../hack/bench/e2e/kwok-instance-types.json");

    #[test]
    fn reads_the_bench_file_with_karpenters_defaults() {
        let types = parse(BENCH.as_bytes(), "bench").expect("the bench file reads");
        let small = types.iter().find(|t| t.name == "small").expect("small");
        assert_eq!(small.capacity.cpu_milli(), 2000);
        assert_eq!(small.allocatable.cpu_milli(), 1900);
        assert_eq!(small.allocatable.memory_bytes(), (4 << 30) - (10 << 20));
        assert_eq!(small.capacity.pods(), 110);
        assert_eq!(small.labels[label::ARCH], "amd64");
        assert_eq!(small.labels[label::OS], "linux");
        assert_eq!(small.labels[labels::INSTANCE_CPU], "2");
        assert_eq!(small.labels[labels::INSTANCE_MEMORY], "4Gi");
        assert_eq!(small.labels[labels::INSTANCE_SIZE], "2");
        assert_eq!(small.labels[labels::INSTANCE_FAMILY], "s");
        let zones: Vec<_> = small.offerings.iter().filter_map(Offering::zone).collect();
        assert_eq!(zones, ["zone-a", "zone-b"]);
        assert!(
            small
                .offerings
                .iter()
                .all(|o| o.available && o.capacity_type() == "on-demand")
        );
    }

    #[test]
    fn defaults_pods_forces_available_and_reads_number_quantities() {
        let json = r#"[{"name": "m5.xlarge", "resources": {"cpu": 4, "memory": "16Gi"},
            "offerings": [{"Price": 0.2, "Available": false, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]}]}]}]"#;
        let types = parse(json.as_bytes(), "x").expect("reads");
        assert_eq!(types[0].capacity.pods(), 110);
        assert_eq!(types[0].capacity.cpu_milli(), 4000);
        assert!(types[0].offerings[0].available);
        assert_eq!(types[0].labels[labels::INSTANCE_SIZE], "xlarge");
        assert_eq!(types[0].labels[labels::INSTANCE_FAMILY], "m5");
        assert!(!types[0].labels.contains_key(label::OS), "no OS given");
        assert!(types[0].volume_limits.is_empty());
        let json = r#"[{"name": "m", "resources": {"cpu": 1, "memory": "1Gi"},
            "volumeLimits": {"ebs.csi.aws.com": 25, "efs.csi.aws.com": 0}}]"#;
        let types = parse(json.as_bytes(), "x").expect("reads");
        assert_eq!(
            types[0].volume_limits,
            BTreeMap::from([("ebs.csi.aws.com".to_string(), 25)])
        );
    }

    #[test]
    fn names_and_families_as_karpenter_derives_them() {
        assert_eq!(size_of("c5.2xlarge", "8"), "2xlarge");
        assert_eq!(size_of("c5.huge", "8"), "8");
        assert_eq!(size_of("c-4x-amd64-linux", "4"), "4");
        assert_eq!(family_of("c-4x-amd64-linux"), "c");
        assert_eq!(family_of("n2-standard-8"), "n2");
        assert_eq!(family_of("Standard_D2s_v3"), "S");
        assert_eq!(family_of(""), "");
    }

    fn error_of(json: &str) -> (String, String, String) {
        match parse(json.as_bytes(), "types.json") {
            Err(Error::InstanceTypes {
                origin,
                field,
                message,
            }) => (origin, field, message),
            other => panic!("expected an instance-type error, got {other:?}"),
        }
    }

    #[test]
    fn errors_name_the_source_and_the_field() {
        let (source, field, message) =
            error_of(r#"[{"name": "a"}, {"name": "b", "resources": {"cpu": "lots"}}]"#);
        assert_eq!(
            (source.as_str(), field.as_str()),
            ("types.json", "[1].resources.cpu")
        );
        assert!(message.contains("lots"), "{message}");
        let (_, field, _) = error_of(r#"[{"name": "a", "offerings": [{"Price": "cheap"}]}]"#);
        assert_eq!(field, "[0].offerings[0].Price");
        let (_, field, _) = error_of(r#"[{"name": "a"}, {"name": "a"}]"#);
        assert_eq!(field, "[1].name");
        let (_, field, _) = error_of(r#"[{"resources": {}}]"#);
        assert_eq!(field, "[0].name");
        let (_, field, message) = error_of(
            r#"[{"name": "a", "offerings": [{"Price": 1, "Requirements": [{"key": "k", "operator": "NotIn", "values": ["v"]}]}]}]"#,
        );
        assert_eq!(field, "[0].offerings[0].Requirements[0]");
        assert!(message.contains("NotIn"), "{message}");
        let (_, field, _) = error_of(r#"{"name": "a"}"#);
        assert_eq!(field, "", "not an array: the document itself");
    }

    #[test]
    fn config_map_key_and_missing_key() {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("kube-system".into());
        cm.metadata.name = Some("kwok-types".into());
        cm.data = Some(BTreeMap::from([(
            CONFIG_MAP_KEY.to_string(),
            BENCH.to_string(),
        )]));
        assert_eq!(
            from_config_map(&cm, CONFIG_MAP_KEY).expect("reads").len(),
            3
        );
        let err = from_config_map(&cm, "other.json").expect_err("no such key");
        assert!(
            err.to_string()
                .contains("ConfigMap kube-system/kwok-types key other.json"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read_file(Path::new("/nonexistent/types.json")).expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/types.json"), "{err}");
    }
}
