//! Pass-through for provider decorators (`Metered`, `Overlaid`): each changes a few calls
//! of the seam and passes the rest on to the provider it wraps. [`forward!`] writes those
//! pass-throughs, every method's signature spelled once here; `decorator_tests` checks that
//! both decorators pass on every call a provider answers differently from the trait's
//! defaults.

/// Implements the named [`crate::provider::CloudProvider`] methods by calling the same method
/// of `self.$inner`, unchanged. Use inside the decorator's `impl CloudProvider`.
/// `forward!(inner: settings)` names every method but the instance calls (create, delete, get,
/// list, is_drifted, reboot) and `instance_types`: what the provider says of itself and the
/// launch notifications, which no decorator changes.
macro_rules! forward {
    ($inner:tt: settings) => {
        $crate::forward::forward!(
            $inner: repair_policies,
            name,
            supported_node_classes,
            changes,
            private_annotations,
            timeouts,
            launch_failed,
            launch_succeeded,
            manual_drift,
            drifted_taint,
            drain_rules,
        );
    };
    ($inner:tt: $($method:ident),* $(,)?) => {
        $( $crate::forward::forward!(@one $inner $method); )*
    };
    // The instance calls on one claim: the same signature but for what they answer.
    (@one $inner:tt create) => {
        $crate::forward::forward!(@claim $inner create $crate::provider::Created);
    };
    (@one $inner:tt delete) => {
        $crate::forward::forward!(@claim $inner delete $crate::provider::Deletion);
    };
    (@one $inner:tt get) => {
        $crate::forward::forward!(@claim $inner get $crate::provider::Instance);
    };
    (@one $inner:tt is_drifted) => {
        $crate::forward::forward!(@claim $inner is_drifted Option<$crate::provider::Drift>);
    };
    (@claim $inner:tt $method:ident $answer:ty) => {
        fn $method<'a>(
            &'a self,
            claim: &'a ::api::NodeClaim,
        ) -> ::futures::future::BoxFuture<'a, Result<$answer, $crate::provider::Error>> {
            self.$inner.$method(claim)
        }
    };
    (@one $inner:tt list) => {
        fn list(
            &self,
        ) -> ::futures::future::BoxFuture<'_, Result<Vec<$crate::provider::Instance>, $crate::provider::Error>> {
            self.$inner.list()
        }
    };
    (@one $inner:tt reboot) => {
        fn reboot<'a>(
            &'a self,
            claim: &'a ::api::NodeClaim,
            operation: &'a str,
        ) -> ::futures::future::BoxFuture<'a, Result<(), $crate::provider::Error>> {
            self.$inner.reboot(claim, operation)
        }
    };
    (@one $inner:tt repair_policies) => {
        fn repair_policies(&self) -> Vec<$crate::repair::RepairPolicy> {
            self.$inner.repair_policies()
        }
    };
    (@one $inner:tt name) => {
        fn name(&self) -> &'static str {
            self.$inner.name()
        }
    };
    (@one $inner:tt supported_node_classes) => {
        fn supported_node_classes(&self) -> Vec<$crate::provider::NodeClassKind> {
            self.$inner.supported_node_classes()
        }
    };
    (@one $inner:tt changes) => {
        fn changes(&self) -> Option<::futures::stream::BoxStream<'static, String>> {
            self.$inner.changes()
        }
    };
    (@one $inner:tt private_annotations) => {
        fn private_annotations(&self) -> Vec<&'static str> {
            self.$inner.private_annotations()
        }
    };
    (@one $inner:tt timeouts) => {
        fn timeouts(&self, claim: &::api::NodeClaim) -> $crate::provider::Timeouts {
            self.$inner.timeouts(claim)
        }
    };
    (@one $inner:tt launch_failed) => {
        fn launch_failed(&self, claim: &::api::NodeClaim, why: &str) {
            self.$inner.launch_failed(claim, why)
        }
    };
    (@one $inner:tt launch_succeeded) => {
        fn launch_succeeded(&self, claim: &::api::NodeClaim) {
            self.$inner.launch_succeeded(claim)
        }
    };
    (@one $inner:tt manual_drift) => {
        fn manual_drift(&self, nodeclass: &str) -> bool {
            self.$inner.manual_drift(nodeclass)
        }
    };
    (@one $inner:tt drifted_taint) => {
        fn drifted_taint(&self) -> Option<::k8s_openapi::api::core::v1::Taint> {
            self.$inner.drifted_taint()
        }
    };
    (@one $inner:tt drain_rules) => {
        fn drain_rules(
            &self,
            claim: &::api::NodeClaim,
        ) -> Result<$crate::drain::DrainRules, $crate::provider::Error> {
            self.$inner.drain_rules(claim)
        }
    };
}

pub(crate) use forward;
