//! Cluster Autoscaler's `capacity.cluster-autoscaler.kubernetes.io/csi-driver` annotation
//! ([`crate::consts::annotations::CA_CSI_DRIVER`]): the CSI drivers a template's nodes run
//! and how many volumes each attaches, `driver=limit,driver2=limit2`.
//!
//! Read as Cluster Autoscaler reads it (`parseCSIDriverAnnotation`, clusterapi provider):
//! items are trimmed, each is `name=limit` with `limit` an integer in `0..=i32::MAX`;
//! `limit > 0` is the driver's attach limit (a CSINode `allocatable.count`), `0` means
//! installed without a limit. Unlike Cluster Autoscaler, which skips a bad item, a bad item
//! here is an error naming it: a template is never half read.

use std::collections::BTreeMap;

/// One bad item of the annotation, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad item {item:?}: {reason}")]
pub struct CsiDriverError {
    pub item: String,
    pub reason: String,
}

/// The drivers the annotation lists, each with its limit (`0`: no limit). Empty items
/// (`""`, a trailing comma) are ignored; a driver listed twice is an error.
pub fn parse_csi_drivers(s: &str) -> Result<BTreeMap<String, u32>, CsiDriverError> {
    let mut out = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = |reason: &str| CsiDriverError {
            item: item.to_string(),
            reason: reason.to_string(),
        };
        let Some((name, limit)) = item.split_once('=') else {
            return Err(bad("expected driver=limit"));
        };
        let (name, limit) = (name.trim(), limit.trim());
        validate_driver_name(name).map_err(|r| bad(&r))?;
        let limit = limit
            .parse::<u32>()
            .ok()
            .filter(|l| i32::try_from(*l).is_ok())
            .ok_or_else(|| bad("limit must be an integer from 0 to 2147483647"))?;
        if out.insert(name.to_string(), limit).is_some() {
            return Err(bad("driver listed twice"));
        }
    }
    Ok(out)
}

/// The attach limits of the annotation: its drivers with a positive limit (a driver with
/// `0`, or not listed, is unlimited).
pub fn volume_limits(drivers: &BTreeMap<String, u32>) -> BTreeMap<String, u32> {
    drivers
        .iter()
        .filter(|(_, l)| **l > 0)
        .map(|(d, l)| (d.clone(), *l))
        .collect()
}

/// A CSI driver name as Kubernetes validates it (CSINode, CSIDriver, PV `spec.csi.driver`:
/// `ValidateCSIDriverName`): 2 to 63 characters, alphanumerics, `-`, `_` and `.`, starting
/// and ending with an alphanumeric.
pub fn validate_driver_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty driver name".into());
    }
    if name.len() < 2 {
        return Err("driver name shorter than 2 characters".into());
    }
    if name.len() > 63 {
        return Err("driver name longer than 63 characters".into());
    }
    let bytes = name.as_bytes();
    let inner = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if inner && ends {
        Ok(())
    } else {
        Err(
            "driver name must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<(String, u32)> {
        parse_csi_drivers(s)
            .unwrap_or_else(|e| panic!("{s:?}: {e}"))
            .into_iter()
            .collect()
    }

    fn err(s: &str) -> CsiDriverError {
        match parse_csi_drivers(s) {
            Ok(m) => panic!("{s:?} parsed as {m:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn good_forms() {
        assert_eq!(ok("ebs.csi.aws.com=25"), [("ebs.csi.aws.com".into(), 25)]);
        assert_eq!(ok("aa=+3"), [("aa".into(), 3)], "as Go's ParseInt");
        assert_eq!(
            ok(" csi.vsphere.vmware.com = 59 , cinder.csi.openstack.org=0 ,"),
            [
                ("cinder.csi.openstack.org".into(), 0),
                ("csi.vsphere.vmware.com".into(), 59)
            ]
        );
        assert_eq!(ok("dd=2147483647"), [("dd".into(), i32::MAX as u32)]);
        assert!(ok("").is_empty());
        assert!(ok(" , ,").is_empty());
    }

    #[test]
    fn zero_is_installed_without_a_limit() {
        let drivers = parse_csi_drivers("a.example.com=0,b.example.com=3").expect("parses");
        assert_eq!(drivers.len(), 2);
        assert_eq!(
            volume_limits(&drivers).into_iter().collect::<Vec<_>>(),
            [("b.example.com".to_string(), 3)]
        );
    }

    #[test]
    fn bad_forms_name_the_item() {
        for (s, item, reason) in [
            (
                "ebs.csi.aws.com",
                "ebs.csi.aws.com",
                "expected driver=limit",
            ),
            ("aa=1,ebs.csi.aws.com=-1", "ebs.csi.aws.com=-1", "integer"),
            ("ebs.csi.aws.com=ten", "ebs.csi.aws.com=ten", "integer"),
            ("ebs.csi.aws.com=2.5", "ebs.csi.aws.com=2.5", "integer"),
            ("dd=2147483648", "dd=2147483648", "integer"),
            ("dd=", "dd=", "integer"),
            ("d=1", "d=1", "shorter than 2"),
            ("=5", "=5", "empty driver name"),
            ("ebs/csi=5", "ebs/csi=5", "alphanumerics"),
            ("-ebs=5", "-ebs=5", "alphanumerics"),
            ("aa=1, aa = 2", "aa = 2", "listed twice"),
        ] {
            let e = err(s);
            assert_eq!(e.item, item, "{s:?}");
            assert!(e.reason.contains(reason), "{s:?}: {e}");
        }
        assert!(err(&format!("{}=1", "d".repeat(64))).reason.contains("63"));
    }
}
