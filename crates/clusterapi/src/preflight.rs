//! Cluster API's MachineSet preflight checks (`machineset_preflight.go`, v1.14), run before
//! every launch of a Machine: our Machines have no MachineSet, so nothing else runs them.
//! Pure: the caller reads the control plane (see `versions`) and acts on the verdict.
//!
//! - `ControlPlaneIsStable`: the control plane is not provisioning (no current version
//!   reported) nor upgrading (`spec.version` ahead of its current version, per the
//!   control-plane contract); for a Cluster with a managed topology, no pending topology
//!   upgrade (`spec.topology.version` differs from the control plane's `spec.version`).
//! - `KubernetesVersionSkew`: the Machine's minor is not newer than the control plane's and at
//!   most 3 older (Kubernetes' kubelet skew policy).
//! - `KubeadmVersionSkew`: with a `KubeadmConfigTemplate` bootstrap, the minors are equal.
//! - `ControlPlaneVersionSkew`: with a managed topology, the Machine's version is exactly the
//!   control plane's `spec.version`.
//!
//! Early exits as in Cluster API: every check skipped; no control plane; a control plane
//! without `spec.version`. Skew checks run only when the Machine has a version. Skew is
//! judged against the control plane's *current* version (`status.versions[0]`, else
//! `status.version`; `spec.version` while none is reported), so that no kubelet is ever
//! newer than the API servers even with `ControlPlaneIsStable` skipped.

use std::cmp::Ordering;

use serde_json::Value;

/// Cluster API's opt-out annotation (comma-separated check names, or `All`), read on the
/// ClusterAPINodeClass.
pub(crate) const SKIP_ANNOTATION: &str = "machineset.cluster.x-k8s.io/skip-preflight-checks";

/// The preflight checks, by Cluster API's names (`MachineSetPreflightCheck`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    ControlPlaneIsStable,
    KubernetesVersionSkew,
    KubeadmVersionSkew,
    ControlPlaneVersionSkew,
}

impl Check {
    pub(crate) const ALL: [Check; 4] = [
        Check::ControlPlaneIsStable,
        Check::KubernetesVersionSkew,
        Check::KubeadmVersionSkew,
        Check::ControlPlaneVersionSkew,
    ];

    /// Cluster API's name (the condition and event reason of a hold).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Check::ControlPlaneIsStable => "ControlPlaneIsStable",
            Check::KubernetesVersionSkew => "KubernetesVersionSkew",
            Check::KubeadmVersionSkew => "KubeadmVersionSkew",
            Check::ControlPlaneVersionSkew => "ControlPlaneVersionSkew",
        }
    }
}

/// The checks skipped by a [`SKIP_ANNOTATION`] value (names trimmed; `All` skips every one;
/// unknown names are ignored, as Cluster API does).
pub(crate) fn skipped(annotation: Option<&str>) -> Vec<Check> {
    let names: Vec<&str> = annotation
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .collect();
    if names.contains(&"All") {
        return Check::ALL.to_vec();
    }
    Check::ALL
        .into_iter()
        .filter(|c| names.contains(&c.name()))
        .collect()
}

/// A Kubernetes version: `v1.36.2`, `1.36.2-rc.1+build` (`v` optional, build ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u64,
    pub(crate) minor: u64,
    pub(crate) patch: u64,
    /// Pre-release (`rc.1`): sorts before the release of the same numbers.
    pub(crate) pre: Option<String>,
}

impl Version {
    pub(crate) fn parse(s: &str) -> Option<Version> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let s = s.split_once('+').map_or(s, |(v, _)| v);
        let (numbers, pre) = match s.split_once('-') {
            Some((n, p)) => (n, Some(p.to_string())),
            None => (s, None),
        };
        let mut parts = numbers.split('.').map(str::parse::<u64>);
        let major = parts.next()?.ok()?;
        let minor = parts.next()?.ok()?;
        let patch = match parts.next() {
            Some(p) => p.ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Version {
            major,
            minor,
            patch,
            pre,
        })
    }

    /// Minor versions between `self` and `other` (positive: `self` newer).
    fn minors_ahead_of(&self, other: &Version) -> i64 {
        let flat = |v: &Version| (v.major as i64) * 1000 + v.minor as i64;
        flat(self) - flat(other)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b),
            })
    }
}

/// What the control-plane contract says of a control plane object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ControlPlane {
    /// `spec.version`: the desired version.
    pub(crate) desired: Option<String>,
    /// `status.versions[].version` (oldest first), else `[status.version]`; empty: none
    /// reported (provisioning).
    pub(crate) versions: Vec<String>,
}

impl ControlPlane {
    /// The contract's fields of a control plane object (`data` of a dynamic object).
    pub(crate) fn of(data: &Value) -> ControlPlane {
        let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let status = &data["status"];
        let mut versions: Vec<String> = status["versions"]
            .as_array()
            .map(|vs| vs.iter().filter_map(|v| s(&v["version"])).collect())
            .unwrap_or_default();
        if versions.is_empty() {
            versions.extend(s(&status["version"]));
        }
        ControlPlane {
            desired: s(&data["spec"]["version"]),
            versions,
        }
    }

    /// The version it runs now (`CurrentStatusVersion`: the oldest reported).
    pub(crate) fn current(&self) -> Option<&str> {
        self.versions.first().map(String::as_str)
    }

    /// `IsProvisioning`: no version reported yet.
    fn provisioning(&self) -> bool {
        self.versions.is_empty()
    }

    /// `IsUpgrading`: a reported version older than `spec.version`.
    fn upgrading(&self) -> bool {
        let Some(desired) = self.desired.as_deref().and_then(Version::parse) else {
            return false;
        };
        self.versions
            .iter()
            .any(|v| Version::parse(v).is_some_and(|v| v < desired))
    }
}

/// What the checks of one launch are judged on.
#[derive(Clone, Debug, Default)]
pub(crate) struct Input<'a> {
    /// The Cluster's control plane (`None`: the Cluster has no `controlPlaneRef`).
    pub(crate) control_plane: Option<&'a ControlPlane>,
    /// The Cluster's `spec.topology.version` (managed topology).
    pub(crate) topology_version: Option<&'a str>,
    /// Whether the Cluster has a managed topology (`spec.topology` set).
    pub(crate) topology: bool,
    /// The Machine's `spec.version`.
    pub(crate) machine_version: Option<&'a str>,
    /// The bootstrap is a `KubeadmConfigTemplate` of `bootstrap.cluster.x-k8s.io`.
    pub(crate) kubeadm: bool,
    pub(crate) skipped: &'a [Check],
}

/// A check that failed, with Cluster API's kind of message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) check: Check,
    pub(crate) message: String,
}

/// The first check that fails, in Cluster API's order; `None`: the launch may go.
pub(crate) fn run(i: &Input) -> Option<Failure> {
    let run = |c: Check| !i.skipped.contains(&c);
    let cp = i.control_plane?;
    let desired = cp.desired.as_deref()?;
    let fail = |check: Check, message: String| Some(Failure { check, message });
    if run(Check::ControlPlaneIsStable) {
        if i.topology
            && let Some(tv) = i.topology_version
            && tv != desired
        {
            return fail(
                Check::ControlPlaneIsStable,
                format!("the control plane has a pending version upgrade to {tv} (now {desired})"),
            );
        }
        if cp.provisioning() {
            return fail(
                Check::ControlPlaneIsStable,
                "the control plane is provisioning (no version reported yet)".into(),
            );
        }
        if cp.upgrading() {
            return fail(
                Check::ControlPlaneIsStable,
                format!(
                    "the control plane is upgrading to {desired} (running {})",
                    cp.versions.join(", ")
                ),
            );
        }
    }
    let mv = i.machine_version?;
    let (Some(machine), Some(reference)) = (
        Version::parse(mv),
        Version::parse(cp.current().unwrap_or(desired)),
    ) else {
        return None;
    };
    let reference_str = cp.current().unwrap_or(desired);
    let ahead = machine.minors_ahead_of(&reference);
    if run(Check::KubernetesVersionSkew) && !(-3..=0).contains(&ahead) {
        return fail(
            Check::KubernetesVersionSkew,
            format!(
                "Machine version {mv} is {} the control plane's {reference_str} (a kubelet may be at most 3 minor versions older, never newer)",
                if ahead > 0 {
                    "newer than"
                } else {
                    "more than 3 minor versions older than"
                }
            ),
        );
    }
    if run(Check::KubeadmVersionSkew) && i.kubeadm && ahead != 0 {
        return fail(
            Check::KubeadmVersionSkew,
            format!(
                "Machine version {mv} and the control plane's {reference_str} differ in minor version (kubeadm joins only the same minor)"
            ),
        );
    }
    if run(Check::ControlPlaneVersionSkew) && i.topology && mv != desired {
        return fail(
            Check::ControlPlaneVersionSkew,
            format!("Machine version {mv} is not the control plane's {desired} (managed topology)"),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cp(desired: &str, status: Option<&str>) -> ControlPlane {
        ControlPlane::of(&json!({"spec": {"version": desired}, "status": {"version": status}}))
    }

    fn check(i: &Input) -> Option<&'static str> {
        run(i).map(|f| f.check.name())
    }

    #[test]
    fn versions_parse_and_order_like_semver() {
        let v = |s| Version::parse(s).expect(s);
        assert_eq!(v("v1.36.2"), v("1.36.2+build.1"));
        assert!(v("v1.36.0-rc.1") < v("v1.36.0"));
        assert!(v("v1.35.9") < v("v1.36.0"));
        assert!(v("v2.0.0") > v("v1.99.0"));
        assert_eq!(v("v1.36").patch, 0);
        assert!(Version::parse("latest").is_none());
        assert!(Version::parse("v1.x.0").is_none());
        assert!(Version::parse("1.2.3.4").is_none());
    }

    #[test]
    fn control_plane_contract_fields() {
        let c = ControlPlane::of(&json!({"spec": {"version": "v1.36.0"},
            "status": {"version": "v1.36.0", "versions": [
                {"version": "v1.35.2", "replicas": 1}, {"version": "v1.36.0", "replicas": 2}]}}));
        assert_eq!(c.current(), Some("v1.35.2"), "versions[0] first");
        assert!(c.upgrading(), "any reported version older than spec");
        let c = cp("v1.36.0", Some("v1.36.0"));
        assert!(!c.upgrading() && !c.provisioning());
        let c = cp("v1.36.0", None);
        assert!(c.provisioning() && !c.upgrading());
        assert!(ControlPlane::of(&json!({"status": {"version": ""}})).provisioning());
    }

    #[test]
    fn control_plane_is_stable() {
        let upgrading = cp("v1.36.0", Some("v1.35.4"));
        let i = Input {
            control_plane: Some(&upgrading),
            ..Input::default()
        };
        assert_eq!(check(&i), Some("ControlPlaneIsStable"));
        let provisioning = cp("v1.36.0", None);
        let i = Input {
            control_plane: Some(&provisioning),
            ..Input::default()
        };
        assert_eq!(check(&i), Some("ControlPlaneIsStable"));
        let stable = cp("v1.36.0", Some("v1.36.0"));
        let mut i = Input {
            control_plane: Some(&stable),
            ..Input::default()
        };
        assert_eq!(check(&i), None, "positive control: stable passes");
        i.topology = true;
        i.topology_version = Some("v1.37.0");
        assert_eq!(check(&i), Some("ControlPlaneIsStable"), "topology ahead");
        i.topology_version = Some("v1.36.0");
        assert_eq!(check(&i), None);
    }

    #[test]
    fn early_exits() {
        let upgrading = cp("v1.36.0", Some("v1.35.4"));
        let none = Input {
            control_plane: None,
            machine_version: Some("v1.40.0"),
            ..Input::default()
        };
        assert_eq!(check(&none), None, "no control plane");
        let unversioned = ControlPlane::of(&json!({"spec": {}, "status": {"version": "v1.30.0"}}));
        let i = Input {
            control_plane: Some(&unversioned),
            machine_version: Some("v1.40.0"),
            ..Input::default()
        };
        assert_eq!(check(&i), None, "control plane without spec.version");
        let all = skipped(Some("All"));
        let i = Input {
            control_plane: Some(&upgrading),
            skipped: &all,
            ..Input::default()
        };
        assert_eq!(check(&i), None);
    }

    #[test]
    fn kubernetes_version_skew_allows_three_older_minors_never_newer() {
        let c = cp("v1.36.0", Some("v1.36.0"));
        let at = |mv: &'static str| {
            check(&Input {
                control_plane: Some(&c),
                machine_version: Some(mv),
                ..Input::default()
            })
        };
        assert_eq!(at("v1.36.5"), None, "same minor, newer patch");
        assert_eq!(at("v1.33.0"), None, "3 minors older");
        assert_eq!(at("v1.32.9"), Some("KubernetesVersionSkew"), "4 older");
        assert_eq!(at("v1.37.0"), Some("KubernetesVersionSkew"), "newer");
        assert_eq!(at("v2.0.0"), Some("KubernetesVersionSkew"), "newer major");
    }

    #[test]
    fn skew_is_judged_against_the_current_version() {
        // ControlPlaneIsStable skipped while upgrading: the kubelet still may not lead the
        // API servers that run now.
        let c = cp("v1.36.0", Some("v1.35.4"));
        let skip = skipped(Some("ControlPlaneIsStable"));
        let at = |mv: &'static str| {
            check(&Input {
                control_plane: Some(&c),
                machine_version: Some(mv),
                skipped: &skip,
                ..Input::default()
            })
        };
        assert_eq!(at("v1.36.0"), Some("KubernetesVersionSkew"));
        assert_eq!(at("v1.35.4"), None);
    }

    #[test]
    fn kubeadm_version_skew_wants_the_same_minor() {
        let c = cp("v1.36.0", Some("v1.36.0"));
        let mut i = Input {
            control_plane: Some(&c),
            machine_version: Some("v1.35.0"),
            kubeadm: true,
            ..Input::default()
        };
        assert_eq!(check(&i), Some("KubeadmVersionSkew"));
        i.kubeadm = false;
        assert_eq!(check(&i), None, "not kubeadm: one minor older is fine");
        i.kubeadm = true;
        i.machine_version = Some("v1.36.3");
        assert_eq!(check(&i), None);
    }

    #[test]
    fn control_plane_version_skew_with_a_managed_topology() {
        let c = cp("v1.36.0", Some("v1.36.0"));
        let mut i = Input {
            control_plane: Some(&c),
            machine_version: Some("v1.36.1"),
            topology: true,
            topology_version: Some("v1.36.0"),
            ..Input::default()
        };
        assert_eq!(check(&i), Some("ControlPlaneVersionSkew"));
        i.machine_version = Some("v1.36.0");
        assert_eq!(check(&i), None);
        i.machine_version = Some("v1.36.1");
        i.topology = false;
        assert_eq!(check(&i), None, "only with a managed topology");
    }

    #[test]
    fn skip_annotation_names_checks() {
        assert_eq!(
            skipped(Some(" KubeadmVersionSkew , ControlPlaneIsStable,Bogus")),
            vec![Check::ControlPlaneIsStable, Check::KubeadmVersionSkew]
        );
        assert!(skipped(None).is_empty());
        assert_eq!(skipped(Some("All")).len(), 4);
        let c = cp("v1.36.0", Some("v1.35.0"));
        let skip = skipped(Some("ControlPlaneIsStable,KubernetesVersionSkew"));
        let i = Input {
            control_plane: Some(&c),
            machine_version: Some("v1.37.0"),
            skipped: &skip,
            ..Input::default()
        };
        assert_eq!(check(&i), None);
    }
}
