//! CRD types: karpenter.sh/v1, ClusterAPINodeClass, the CAPI kinds we touch.
