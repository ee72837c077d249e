//! `scheduling::volumes::resolve`: the claim each volume names, why a pod is blocked, the
//! topology alternatives its volumes allow, the attachments it makes.

use scheduling::volumes::*;
use scheduling::*;

const NS: &str = "db";
const POD: &str = "db-0";
const UID: &str = "uid-db-0";

fn zone(values: &[&str]) -> Vec<Requirement> {
    vec![Requirement::new(LABEL_ZONE, Operator::In, values)]
}

fn host(h: &str) -> Vec<Requirement> {
    vec![Requirement::new(LABEL_HOSTNAME, Operator::In, &[h])]
}

fn claim_vol(volume: &str, claim: &str) -> PodVolume {
    PodVolume::Claim {
        volume: volume.into(),
        claim: claim.into(),
    }
}

fn bound(pv: &str) -> Claim {
    Claim {
        volume_name: Some(pv.into()),
        bind_completed: true,
        ..Claim::default()
    }
}

fn unbound(class: &str) -> Claim {
    Claim {
        storage_class: Some(class.into()),
        ..Claim::default()
    }
}

fn pv(terms: Vec<Vec<Requirement>>, driver: Option<&str>) -> Volume {
    Volume {
        node_affinity: terms,
        csi_driver: driver.map(str::to_string),
        ..Volume::default()
    }
}

fn wffc(provisioner: &str, topologies: Vec<Vec<Requirement>>) -> Class {
    Class {
        provisioner: provisioner.into(),
        wait_for_first_consumer: Some(true),
        allowed_topologies: topologies,
    }
}

#[derive(Default)]
struct World(Objects);

impl World {
    fn claim(mut self, name: &str, c: Claim) -> Self {
        self.0.claims.insert((NS.into(), name.into()), c);
        self
    }
    fn pv(mut self, name: &str, v: Volume) -> Self {
        self.0.volumes.insert(name.into(), v);
        self
    }
    fn class(mut self, name: &str, c: Class) -> Self {
        self.0.classes.insert(name.into(), c);
        self
    }
    fn host(mut self, h: &str) -> Self {
        self.0.hostnames.insert(h.into());
        self
    }
    fn resolve(&self, vols: &[PodVolume]) -> Result<Resolved, Blocked> {
        resolve(NS, POD, UID, vols, &self.0)
    }
}

fn blocked(r: Result<Resolved, Blocked>) -> Blocked {
    match r {
        Err(b) => b,
        Ok(r) => panic!("expected blocked, got {r:?}"),
    }
}

fn ok(r: Result<Resolved, Blocked>) -> Resolved {
    match r {
        Ok(r) => r,
        Err(b) => panic!("expected resolved, got {b}"),
    }
}

// --- claim names ---

#[test]
fn claim_volume_names_its_claim() {
    let w = World::default()
        .claim("data", bound("pv-a"))
        .pv("pv-a", pv(vec![zone(&["zone-a"])], Some("ebs.csi.aws.com")));
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![zone(&["zone-a"])]);
    // Another claim name misses it.
    let b = blocked(w.resolve(&[claim_vol("v", "other")]));
    assert_eq!(b.volume, "v");
    assert_eq!(b.reason, "persistentvolumeclaim db/other not found");
}

#[test]
fn ephemeral_volume_claim_is_pod_name_dash_volume_and_owned_by_the_pod() {
    let owned = Claim {
        controller_pod_uid: Some(UID.into()),
        ..bound("pv-a")
    };
    let w = World::default()
        .claim("db-0-scratch", owned.clone())
        .pv("pv-a", pv(vec![zone(&["zone-b"])], None));
    let eph = [PodVolume::Ephemeral {
        volume: "scratch".into(),
    }];
    assert_eq!(ok(w.resolve(&eph)).alternatives, vec![zone(&["zone-b"])]);

    // Owned by another pod (a stale claim of an earlier pod of that name).
    let stale = Claim {
        controller_pod_uid: Some("uid-old".into()),
        ..owned.clone()
    };
    let w2 = World::default()
        .claim("db-0-scratch", stale)
        .pv("pv-a", pv(vec![], None));
    let b = blocked(w2.resolve(&eph));
    assert!(b.reason.contains("not created for pod db/db-0"), "{b}");
    // No controller at all.
    let w3 = World::default()
        .claim("db-0-scratch", bound("pv-a"))
        .pv("pv-a", pv(vec![], None));
    assert!(w3.resolve(&eph).is_err());
    // A plain claim needs no owner.
    assert!(w3.resolve(&[claim_vol("v", "db-0-scratch")]).is_ok());
}

#[test]
fn missing_ephemeral_claim_waits_for_the_controller() {
    let b = blocked(World::default().resolve(&[PodVolume::Ephemeral {
        volume: "scratch".into(),
    }]));
    assert_eq!(
        b.reason,
        "waiting for the ephemeral volume controller to create persistentvolumeclaim db/db-0-scratch"
    );
    assert_eq!(b.to_string(), format!("volume scratch: {}", b.reason));
}

// --- blocked claims ---

#[test]
fn deleting_claim_blocks() {
    let c = Claim {
        deleting: true,
        ..bound("pv-a")
    };
    let w = World::default()
        .claim("data", c)
        .pv("pv-a", pv(vec![], None));
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("db/data is being deleted"), "{b}");
    let w = World::default()
        .claim("data", bound("pv-a"))
        .pv("pv-a", pv(vec![], None));
    assert!(w.resolve(&[claim_vol("v", "data")]).is_ok());
}

#[test]
fn lost_claim_blocks() {
    let c = Claim {
        lost: true,
        ..bound("pv-a")
    };
    let w = World::default()
        .claim("data", c)
        .pv("pv-a", pv(vec![], None));
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("non-existent persistentvolume"), "{b}");
}

#[test]
fn bound_claim_without_bind_completed_blocks() {
    let c = Claim {
        bind_completed: false,
        ..bound("pv-a")
    };
    let w = World::default()
        .claim("data", c)
        .pv("pv-a", pv(vec![], None));
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains(ANNOTATION_BIND_COMPLETED), "{b}");
    assert!(b.reason.contains("db/data"), "{b}");
}

#[test]
fn bound_claim_with_missing_or_deleting_volume_blocks() {
    let w = World::default().claim("data", bound("pv-a"));
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(
        b.reason
            .contains("bound to non-existent persistentvolume pv-a"),
        "{b}"
    );
    let gone = Volume {
        deleting: true,
        ..pv(vec![], None)
    };
    let w = w.pv("pv-a", gone);
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("persistentvolume pv-a"), "{b}");
    assert!(b.reason.contains("being deleted"), "{b}");
}

#[test]
fn unbound_claim_without_class_blocks() {
    let w = World::default().claim("data", Claim::default());
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("has no storage class"), "{b}");
    let w = World::default().claim("data", unbound(""));
    assert!(w.resolve(&[claim_vol("v", "data")]).is_err());
}

#[test]
fn unbound_claim_with_missing_class_blocks_but_bound_one_does_not() {
    // "should schedule with a missing storage class if the pvc is bound"
    let w = World::default().claim("data", unbound("gone"));
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("storageclass gone"), "{b}");
    let c = Claim {
        storage_class: Some("gone".into()),
        ..bound("pv-a")
    };
    let w = World::default()
        .claim("data", c)
        .pv("pv-a", pv(vec![], None));
    assert!(w.resolve(&[claim_vol("v", "data")]).is_ok());
}

#[test]
fn unbound_claim_of_immediate_or_unset_binding_mode_blocks() {
    // "should not launch nodes for pod with unbound volume for volumeBindingMode immediate"
    let imm = Class {
        wait_for_first_consumer: Some(false),
        ..wffc("ebs.csi.aws.com", vec![])
    };
    let w = World::default()
        .claim("data", unbound("imm"))
        .class("imm", imm);
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("immediate volume binding mode"), "{b}");
    let unset = Class {
        wait_for_first_consumer: None,
        ..wffc("ebs.csi.aws.com", vec![])
    };
    let w = World::default()
        .claim("data", unbound("unset"))
        .class("unset", unset);
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert!(b.reason.contains("no volumeBindingMode"), "{b}");
    let w = World::default()
        .claim("data", unbound("wffc"))
        .class("wffc", wffc("ebs.csi.aws.com", vec![]));
    assert!(w.resolve(&[claim_vol("v", "data")]).is_ok());
}

#[test]
fn the_first_blocking_volume_is_named() {
    let w = World::default()
        .claim("ok", bound("pv-a"))
        .pv("pv-a", pv(vec![], None));
    let b = blocked(w.resolve(&[claim_vol("a", "ok"), claim_vol("b", "missing")]));
    assert_eq!(b.volume, "b");
}

// --- local volumes ---

#[test]
fn local_volume_on_a_gone_host_blocks() {
    let local = Volume {
        local: true,
        ..pv(vec![host("node-old")], None)
    };
    let w = World::default()
        .claim("data", bound("pv-l"))
        .pv("pv-l", local.clone())
        .host("node-1");
    let b = blocked(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(
        b.reason,
        "local volume pv-l is on host node-old, which no node has"
    );
    // The host exists: the pod may go only there.
    let w = w.host("node-old");
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![host("node-old")]);
}

#[test]
fn local_volume_keeps_terms_a_node_can_meet() {
    let local = Volume {
        local: true,
        ..pv(vec![host("gone"), host("node-1"), zone(&["zone-a"])], None)
    };
    let w = World::default()
        .claim("data", bound("pv-l"))
        .pv("pv-l", local)
        .host("node-1");
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![host("node-1"), zone(&["zone-a"])]);
}

#[test]
fn non_local_volume_keeps_hostname_even_for_a_gone_host() {
    // "should not ignore hostname affinity when using non-local path volumes"
    let w = World::default()
        .claim("data", bound("pv-n"))
        .pv("pv-n", pv(vec![host("gone")], None));
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![host("gone")]);
}

// --- topology ---

#[test]
fn bound_volume_terms_are_alternatives_and_no_affinity_is_unconstrained() {
    let w = World::default()
        .claim("data", bound("pv-a"))
        .pv(
            "pv-a",
            pv(vec![zone(&["zone-a"]), zone(&["zone-b"])], Some("d")),
        )
        .claim("free", bound("pv-free"))
        .pv("pv-free", pv(vec![], Some("d")));
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![zone(&["zone-a"]), zone(&["zone-b"])]);
    assert_eq!(
        r.pins,
        [
            "needs topology.kubernetes.io/zone in [zone-a] or topology.kubernetes.io/zone in [zone-b]: volume v (claim data)"
        ]
    );
    let r = ok(w.resolve(&[claim_vol("w", "free")]));
    assert!(r.alternatives.is_empty());
    assert!(r.pins.is_empty());
}

#[test]
fn wffc_class_allowed_topologies_are_alternatives_empty_is_unconstrained() {
    // "should schedule to storage class zones if volume does not exist"
    let w = World::default()
        .claim("data", unbound("zonal"))
        .class(
            "zonal",
            wffc("ebs.csi.aws.com", vec![zone(&["zone-a", "zone-c"])]),
        )
        .claim("any", unbound("anywhere"))
        .class("anywhere", wffc("ebs.csi.aws.com", vec![]));
    let r = ok(w.resolve(&[claim_vol("v", "data")]));
    assert_eq!(r.alternatives, vec![zone(&["zone-a", "zone-c"])]);
    assert_eq!(
        r.pins,
        ["needs topology.kubernetes.io/zone in [zone-a, zone-c]: volume v (claim data)"]
    );
    let r = ok(w.resolve(&[claim_vol("v", "any")]));
    assert!(r.alternatives.is_empty());
}

#[test]
fn several_volumes_multiply_and_prune_disjoint_combinations() {
    // "should schedule pods when a valid multi-volume topology alternative remains after
    // pruning disjoint branches"
    let w = World::default()
        .claim("a", bound("pv-a"))
        .pv("pv-a", pv(vec![zone(&["z1"]), zone(&["z2"])], None))
        .claim("b", bound("pv-b"))
        .pv("pv-b", pv(vec![zone(&["z2"]), zone(&["z3"])], None))
        .claim("c", bound("pv-c"))
        .pv("pv-c", pv(vec![], None));
    let r = ok(w.resolve(&[
        claim_vol("va", "a"),
        claim_vol("vc", "c"),
        claim_vol("vb", "b"),
    ]));
    assert_eq!(
        r.alternatives,
        vec![[zone(&["z2"]), zone(&["z2"])].concat()]
    );
    assert_eq!(r.pins.len(), 2);
}

#[test]
fn several_volumes_all_disjoint_keep_the_whole_product() {
    let w = World::default()
        .claim("a", bound("pv-a"))
        .pv("pv-a", pv(vec![zone(&["z1"])], None))
        .claim("b", bound("pv-b"))
        .pv("pv-b", pv(vec![zone(&["z2"]), zone(&["z3"])], None));
    let r = ok(w.resolve(&[claim_vol("va", "a"), claim_vol("vb", "b")]));
    assert_eq!(
        r.alternatives,
        vec![
            [zone(&["z1"]), zone(&["z2"])].concat(),
            [zone(&["z1"]), zone(&["z3"])].concat()
        ]
    );
    // The pod fits no node: every alternative is empty.
    for alt in &r.alternatives {
        assert!(!Requirements::from_list(alt).allows(&Default::default()));
    }
}

#[test]
fn pruning_reads_deprecated_zone_keys_as_stable() {
    let beta = vec![Requirement::new(
        "failure-domain.beta.kubernetes.io/zone",
        Operator::In,
        &["z1"],
    )];
    let w = World::default()
        .claim("a", bound("pv-a"))
        .pv("pv-a", pv(vec![beta.clone()], None))
        .claim("b", bound("pv-b"))
        .pv("pv-b", pv(vec![zone(&["z1"]), zone(&["z2"])], None));
    let r = ok(w.resolve(&[claim_vol("va", "a"), claim_vol("vb", "b")]));
    assert_eq!(r.alternatives, vec![[beta, zone(&["z1"])].concat()]);
}

// --- uses ---

#[test]
fn uses_name_the_bound_volume_driver_or_the_translated_provisioner() {
    let w = World::default()
        .claim("bound", bound("pv-a"))
        .pv("pv-a", pv(vec![], Some("ebs.csi.aws.com")))
        .claim("intree", unbound("gp2"))
        .class("gp2", wffc("kubernetes.io/aws-ebs", vec![]))
        .claim("csi", unbound("fast"))
        .class("fast", wffc("example.com/csi", vec![]))
        .claim("nfs", bound("pv-nfs"))
        .pv("pv-nfs", pv(vec![], None))
        .claim("static", unbound("local"))
        .class("local", wffc(NO_PROVISIONER, vec![]));
    let r = ok(w.resolve(&[
        claim_vol("a", "bound"),
        claim_vol("b", "intree"),
        claim_vol("c", "csi"),
        claim_vol("d", "nfs"),
        claim_vol("e", "static"),
        claim_vol("f", "bound"),
    ]));
    let uses: Vec<(&str, &str)> = r
        .uses
        .iter()
        .map(|u| (u.driver.as_str(), u.id.as_str()))
        .collect();
    assert_eq!(
        uses,
        [
            ("ebs.csi.aws.com", "db/bound"),
            ("ebs.csi.aws.com", "db/intree"),
            ("example.com/csi", "db/csi"),
        ]
    );
}

#[test]
fn every_in_tree_provisioner_translates() {
    for (in_tree, csi) in [
        ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
        ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
        ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
        ("kubernetes.io/azure-file", "file.csi.azure.com"),
        ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
        ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
        ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
    ] {
        assert_eq!(class_driver(in_tree).as_deref(), Some(csi));
    }
    assert_eq!(
        class_driver("rook-ceph.rbd.csi.ceph.com").as_deref(),
        Some("rook-ceph.rbd.csi.ceph.com")
    );
    assert_eq!(class_driver(""), None);
}
