//! Event filters evaluated on cached metadata (no typed decode).

use std::fmt;
use std::sync::Arc;

use kcache_core::Metadata;

/// An informer event as a predicate sees it: metadata only.
#[derive(Debug, Clone, Copy)]
pub enum PredicateEvent<'a> {
    /// An object was added (including objects of the initial list).
    Create(&'a Metadata),
    /// An object changed (or, on a resync, did not: equal resourceVersions).
    Update {
        /// The cached state before the change.
        old: &'a Metadata,
        /// The state after the change.
        new: &'a Metadata,
    },
    /// An object was deleted (for a tombstone: its last known state).
    Delete(&'a Metadata),
}

type PredicateFn = dyn Fn(&PredicateEvent<'_>) -> bool + Send + Sync;

/// Decides whether an informer event should enqueue a reconcile
/// (controller-runtime's predicates).
///
/// The built-in predicates judge updates and let creates and deletes pass:
/// [`generation_changed`](Self::generation_changed),
/// [`labels_changed`](Self::labels_changed),
/// [`annotations_changed`](Self::annotations_changed),
/// [`resource_version_changed`](Self::resource_version_changed). Combine
/// them with [`and`](Self::and), [`or`](Self::or) and [`not`](Self::not)
/// (or `&`, `|`, `!`); `not` negates every event kind, creates and deletes
/// included, like controller-runtime's `predicate.Not`.
///
/// ```
/// use kcache_controller::Predicate;
///
/// // Reconcile on spec changes or when the labels change, not on status updates.
/// let p = Predicate::generation_changed() | Predicate::labels_changed();
/// # let _ = p;
/// ```
#[derive(Clone)]
pub struct Predicate {
    name: Arc<str>,
    f: Arc<PredicateFn>,
}

impl fmt::Debug for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Predicate").field(&self.name).finish()
    }
}

impl Predicate {
    /// A predicate from a function of the event.
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(&PredicateEvent<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: Arc::from(name.into()),
            f: Arc::new(f),
        }
    }

    /// A predicate that judges updates with `f(old, new)` and lets creates
    /// and deletes pass.
    pub fn on_update(
        name: impl Into<String>,
        f: impl Fn(&Metadata, &Metadata) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::new(name, move |ev| match ev {
            PredicateEvent::Update { old, new } => f(old, new),
            _ => true,
        })
    }

    /// Passes every event.
    pub fn always() -> Self {
        Self::new("always", |_| true)
    }

    /// Updates pass when `metadata.generation` changed (spec changes of
    /// objects that have a generation; status-only updates do not pass).
    /// Objects without a generation (such as ConfigMaps) never pass an
    /// update.
    pub fn generation_changed() -> Self {
        Self::on_update("generation_changed", |old, new| {
            old.generation() != new.generation()
        })
    }

    /// Updates pass when `metadata.labels` changed.
    pub fn labels_changed() -> Self {
        Self::on_update("labels_changed", |old, new| old.labels() != new.labels())
    }

    /// Updates pass when `metadata.annotations` changed.
    pub fn annotations_changed() -> Self {
        Self::on_update("annotations_changed", |old, new| {
            old.annotations() != new.annotations()
        })
    }

    /// Updates pass when `metadata.resourceVersion` changed: periodic
    /// resyncs (same resourceVersion) are dropped.
    pub fn resource_version_changed() -> Self {
        Self::on_update("resource_version_changed", |old, new| {
            old.resource_version() != new.resource_version()
        })
    }

    /// Passes when both pass (the second is not evaluated when the first
    /// fails).
    pub fn and(self, other: Predicate) -> Self {
        let name = format!("({} and {})", self.name, other.name);
        Self::new(name, move |ev| self.evaluate(ev) && other.evaluate(ev))
    }

    /// Passes when either passes.
    pub fn or(self, other: Predicate) -> Self {
        let name = format!("({} or {})", self.name, other.name);
        Self::new(name, move |ev| self.evaluate(ev) || other.evaluate(ev))
    }

    /// Passes when `self` does not (for every kind of event).
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Self {
        let name = format!("not {}", self.name);
        Self::new(name, move |ev| !self.evaluate(ev))
    }

    /// Passes when every predicate passes (an empty list passes).
    pub fn all(predicates: impl IntoIterator<Item = Predicate>) -> Self {
        Self::all_or_any(false, predicates)
    }

    /// Passes when any predicate passes (an empty list does not pass).
    pub fn any(predicates: impl IntoIterator<Item = Predicate>) -> Self {
        Self::all_or_any(true, predicates)
    }

    /// [`any`](Self::any) of `predicates`, or [`all`](Self::all) of them:
    /// named `any(a, b)` or `all(a, b)`, evaluated in order up to the first
    /// that decides.
    fn all_or_any(any: bool, predicates: impl IntoIterator<Item = Predicate>) -> Self {
        let ps: Vec<Predicate> = predicates.into_iter().collect();
        let names: Vec<&str> = ps.iter().map(|p| &*p.name).collect();
        let name = format!("{}({})", if any { "any" } else { "all" }, names.join(", "));
        Self::new(name, move |ev| {
            if any {
                ps.iter().any(|p| p.evaluate(ev))
            } else {
                ps.iter().all(|p| p.evaluate(ev))
            }
        })
    }

    /// Evaluates the predicate.
    pub fn evaluate(&self, event: &PredicateEvent<'_>) -> bool {
        (self.f)(event)
    }

    /// The predicate's name (for logs).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::ops::BitAnd for Predicate {
    type Output = Predicate;
    fn bitand(self, rhs: Predicate) -> Predicate {
        self.and(rhs)
    }
}

impl std::ops::BitOr for Predicate {
    type Output = Predicate;
    fn bitor(self, rhs: Predicate) -> Predicate {
        self.or(rhs)
    }
}

impl std::ops::Not for Predicate {
    type Output = Predicate;
    fn not(self) -> Predicate {
        Predicate::not(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kcache_core::CachedObject;
    use serde_json::json;

    type Obj = serde_json::Value;

    fn obj(v: serde_json::Value) -> CachedObject<Obj> {
        CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn predicates_and_combinators() {
        let m = |rv: &str, generation: i64, label: &str, ann: &str| {
            obj(
                json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                "generation": generation, "labels": {"l": label}, "annotations": {"a": ann}}}),
            )
        };
        let base = m("1", 1, "x", "x");
        fn update<'a>(
            old: &'a CachedObject<Obj>,
            new: &'a CachedObject<Obj>,
        ) -> PredicateEvent<'a> {
            PredicateEvent::Update {
                old: old.meta(),
                new: new.meta(),
            }
        }
        let gen2 = m("2", 2, "x", "x");
        let label = m("2", 1, "y", "x");
        let ann = m("2", 1, "x", "y");
        let resync = m("1", 1, "x", "x");
        let g = Predicate::generation_changed();
        let l = Predicate::labels_changed();
        let a = Predicate::annotations_changed();
        let rv = Predicate::resource_version_changed();
        assert!(g.evaluate(&update(&base, &gen2)) && !g.evaluate(&update(&base, &label)));
        assert!(l.evaluate(&update(&base, &label)) && !l.evaluate(&update(&base, &gen2)));
        assert!(a.evaluate(&update(&base, &ann)) && !a.evaluate(&update(&base, &label)));
        assert!(rv.evaluate(&update(&base, &ann)) && !rv.evaluate(&update(&base, &resync)));
        // creates and deletes pass the update predicates
        assert!(g.evaluate(&PredicateEvent::Create(base.meta())));
        assert!(g.evaluate(&PredicateEvent::Delete(base.meta())));
        let either = g.clone() | l.clone();
        assert!(
            either.evaluate(&update(&base, &gen2))
                && either.evaluate(&update(&base, &label))
                && !either.evaluate(&update(&base, &ann))
        );
        let both = g.clone() & rv.clone();
        assert!(both.evaluate(&update(&base, &gen2)) && !both.evaluate(&update(&base, &label)));
        let not_g = !g.clone();
        assert!(not_g.evaluate(&update(&base, &label)) && !not_g.evaluate(&update(&base, &gen2)));
        assert!(
            !not_g.evaluate(&PredicateEvent::Create(base.meta())),
            "not negates creates too"
        );
        assert!(Predicate::all([g.clone(), rv.clone()]).evaluate(&update(&base, &gen2)));
        assert!(!Predicate::any(Vec::new()).evaluate(&update(&base, &gen2)));
        assert!(Predicate::all(Vec::new()).evaluate(&update(&base, &gen2)));
        assert_eq!(either.name(), "(generation_changed or labels_changed)");
    }
}
