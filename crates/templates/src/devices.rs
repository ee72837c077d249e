//! The devices (Dynamic Resource Allocation) a template's nodes publish, as the template
//! declares them ([`api::dra`]: the `karpenter.cluster.x-k8s.io/resource-slices` annotation,
//! ResourceSlices copied from a running node, winning over Cluster Autoscaler's
//! `capacity.cluster-autoscaler.kubernetes.io/dra-driver` with `…/gpu-count`).
//!
//! A malformed value excludes the template with [`TemplateError::Devices`], naming the
//! annotation and what is wrong (a capacity must also be a quantity).
//!
//! What a running Node of the template published ([`learned`], from the NodeClass's
//! `status.learnedDevices`) wins over what the annotations declare.

use std::collections::BTreeMap;

use cloudprovider::{DeviceSlice, DeviceSource, Devices};

use crate::error::TemplateError;
use crate::reference::TemplateRef;

/// The devices learned from a Node of the template (`raw`: its `status.learnedDevices`
/// entry); `None` when there is none, or it does not read (then the annotations count).
pub fn learned(raw: Option<&String>) -> Option<Devices> {
    let slices = api::dra::parse_resource_slices(raw?).ok()?;
    let quantities_read = slices.iter().flat_map(|s| &s.devices).all(|d| {
        d.capacity
            .iter()
            .flatten()
            .all(|(_, c)| crate::quantity::parse_milli(&c.value.0).is_ok())
    });
    (!slices.is_empty() && quantities_read).then(|| Devices {
        source: DeviceSource::Learned,
        slices: into_slices(slices),
    })
}

fn into_slices(slices: Vec<api::dra::DeclaredSlice>) -> Vec<DeviceSlice> {
    slices
        .into_iter()
        .map(|s| DeviceSlice {
            driver: s.driver,
            devices: s.devices,
        })
        .collect()
}

/// The devices the annotations declare (`None`: none).
pub fn declared(
    tref: &TemplateRef,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Devices>, TemplateError> {
    let err = |key: &str, reason: String| TemplateError::Devices {
        template: Box::new(tref.clone()),
        field: format!("metadata.annotations[{key}]"),
        reason,
    };
    let slices = api::dra::declared(annotations).map_err(|(key, r)| err(key, r))?;
    for s in &slices {
        for d in &s.devices {
            for (k, c) in d.capacity.iter().flatten() {
                crate::quantity::parse_milli(&c.value.0).map_err(|e| {
                    err(
                        api::consts::annotations::RESOURCE_SLICES,
                        format!("driver {}: device {}: capacity {k}: {e}", s.driver, d.name),
                    )
                })?;
            }
        }
    }
    Ok((!slices.is_empty()).then(|| Devices {
        source: DeviceSource::Declared,
        slices: into_slices(slices),
    }))
}
