//! What a provider answers for a NodeClass: its instance types, and the resizable groups any
//! size of which is made on demand.

use std::borrow::Cow;

use crate::model::{InstanceType, PriceSource, sort_instance_types};
use crate::resize::{ResizableGroup, Size, parse_sized_name};

/// The instance types of a NodeClass (Karpenter's `GetInstanceTypes`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceTypes {
    /// Sorted by cheapest offering, then name.
    pub instance_types: Vec<InstanceType>,
    /// The resizable groups: their grid is in `instance_types`, any other size of theirs is
    /// made on demand ([`InstanceTypes::lookup`]).
    pub resizable: Vec<ResizableGroup>,
}

impl InstanceTypes {
    /// Instance types without resizable groups.
    pub fn of(instance_types: Vec<InstanceType>) -> InstanceTypes {
        InstanceTypes {
            instance_types,
            resizable: Vec::new(),
        }
    }

    /// The grid of one resizable group, and the group.
    pub fn of_group(group: ResizableGroup) -> InstanceTypes {
        let mut instance_types = group.grid();
        sort_instance_types(&mut instance_types);
        InstanceTypes {
            instance_types,
            resizable: vec![group],
        }
    }

    /// The instance type called `name`.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.iter().find(|t| t.name == name)
    }

    /// The price of the offering of instance type `name` (a size of a resizable group too)
    /// in `capacity_type` and `zone` (an offering without a zone matches any), as a node
    /// with these labels is priced.
    pub fn price_of(&self, name: &str, capacity_type: &str, zone: Option<&str>) -> Option<f64> {
        let it = self.lookup(name)?;
        it.offerings
            .iter()
            .find(|o| {
                o.capacity_type == capacity_type && (o.zone.is_none() || o.zone.as_deref() == zone)
            })
            .map(|o| o.price)
    }

    /// The resizable group `name` is a size of, and the size.
    pub fn resizable_of(&self, name: &str) -> Option<(&ResizableGroup, Size)> {
        self.resizable
            .iter()
            .find_map(|g| Some((g, parse_sized_name(&g.base, name)?)))
    }

    /// The instance type called `name`: listed, or a size of a resizable group within its
    /// bounds (made now).
    pub fn lookup(&self, name: &str) -> Option<Cow<'_, InstanceType>> {
        if let Some(it) = self.get(name) {
            return Some(Cow::Borrowed(it));
        }
        let (group, size) = self.resizable_of(name)?;
        group.instance_type(size).map(Cow::Owned)
    }

    /// These instance types with those of `names` that are sizes of a resizable group but
    /// not listed added (borrowed when there are none).
    pub fn with_sizes<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Cow<'_, InstanceTypes> {
        let extra: Vec<InstanceType> = names
            .into_iter()
            .filter(|n| self.get(n).is_none())
            .filter_map(|n| self.lookup(n).map(Cow::into_owned))
            .collect();
        if extra.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut c = self.clone();
        c.instance_types.extend(extra);
        sort_instance_types(&mut c.instance_types);
        Cow::Owned(c)
    }

    /// Whether any of `names` has an offering priced by an overlay, and whether any has
    /// capacity an overlay extended: the NodeClaim annotations
    /// `karpenter.sh/price-overlay-applied` and `karpenter.sh/capacity-overlay-applied`.
    pub fn overlay_marks(&self, names: &[String]) -> (bool, bool) {
        let types = || {
            self.instance_types
                .iter()
                .filter(|it| names.contains(&it.name))
        };
        let price = types().any(|it| {
            it.offerings
                .iter()
                .any(|o| o.price_source == PriceSource::Overlay)
        });
        let capacity = types().any(|it| it.capacity_overlaid);
        (price, capacity)
    }
}
