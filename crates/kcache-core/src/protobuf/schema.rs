//! The shape of the field tables `cargo xtask codegen` writes into
//! `tables.rs`: per protobuf message, field number -> JSON name, type,
//! cardinality and what the JSON route does differently.

use super::tables;

/// Index of a message in [`tables::MESSAGES`].
pub(crate) type MsgId = u16;

/// A field's value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Bool,
    Int32,
    Int64,
    String,
    /// Base64 text in JSON (`ByteString` in k8s-openapi).
    Bytes,
    Msg(MsgId),
}

/// A field's cardinality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    One,
    Repeated,
    /// `map<string, ty>`: repeated entries {1 key, 2 value}.
    Map,
}

/// The Go field is a non-pointer scalar tagged `omitempty` (or a
/// `Time` tagged `omitzero`): JSON omits its zero value, protobuf writes it.
pub(crate) const OMIT_ZERO: u8 = 1;
/// An embedded struct that JSON inlines into its parent (`json:""`) while
/// protobuf nests it (`Volume.volumeSource`, `Probe.handler`...).
pub(crate) const INLINE: u8 = 2;

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub(crate) number: u32,
    pub(crate) json: &'static str,
    pub(crate) ty: Ty,
    pub(crate) card: Card,
    pub(crate) flags: u8,
}

/// A message whose JSON form is not a JSON object of its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    None,
    /// `metav1.Time`: `Timestamp {1 seconds, 2 nanos}` -> RFC 3339, seconds.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds.
    MicroTime,
    /// `resource.Quantity` {1 string} -> the string.
    Quantity,
    /// `intstr.IntOrString` {1 type, 2 intVal, 3 strVal} -> int or string.
    IntOrString,
    /// `runtime.RawExtension`, `metav1.FieldsV1` {1 raw} -> the raw JSON.
    RawJson,
    /// A named slice (`ExtraValue`, `Verbs`) {1 repeated items} -> the array.
    Items,
}

/// One message.
#[derive(Debug)]
pub(crate) struct Message {
    /// Full protobuf name (`k8s.io.api.core.v1.Pod`).
    pub(crate) name: &'static str,
    pub(crate) special: Special,
    /// Sorted by field number.
    pub(crate) fields: &'static [Field],
}

/// A top-level kind: `apiVersion` + `kind` -> its message.
#[derive(Debug)]
pub(crate) struct KindEntry {
    pub(crate) api_version: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) msg: MsgId,
}

/// Table-building shorthand used by the generated file.
pub(crate) const fn f(number: u32, json: &'static str, ty: Ty, card: Card, flags: u8) -> Field {
    Field {
        number,
        json,
        ty,
        card,
        flags,
    }
}

impl Message {
    /// The field with this number.
    #[inline]
    pub(crate) fn field(&self, number: u32, hint: &mut usize) -> Option<(usize, &'static Field)> {
        let fields = self.fields;
        // Fields come in number order on the wire: try where the last one was.
        if let Some(f) = fields.get(*hint)
            && f.number == number
        {
            *hint += 1;
            return Some((*hint - 1, f));
        }
        let i = fields.binary_search_by_key(&number, |f| f.number).ok()?;
        *hint = i + 1;
        // `fields` is `&'static`, so is the element.
        let f: &'static Field = &fields[i];
        Some((i, f))
    }
}

/// The message with this id.
pub(crate) fn message(id: MsgId) -> &'static Message {
    &tables::MESSAGES[usize::from(id)]
}

/// The message of a top-level kind (`v1`, `Pod`).
pub(crate) fn kind_message(api_version: &str, kind: &str) -> Option<&'static Message> {
    let i = tables::KINDS
        .binary_search_by(|k| (k.api_version, k.kind).cmp(&(api_version, kind)))
        .ok()?;
    Some(message(tables::KINDS[i].msg))
}

/// The message with this full protobuf name.
#[cfg(test)]
pub(crate) fn message_named(name: &str) -> Option<&'static Message> {
    let i = tables::MESSAGES
        .binary_search_by(|m| m.name.cmp(name))
        .ok()?;
    Some(&tables::MESSAGES[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_and_consistent() {
        let msgs = &tables::MESSAGES;
        assert!(msgs.windows(2).all(|w| w[0].name < w[1].name));
        assert!(
            tables::KINDS
                .windows(2)
                .all(|w| (w[0].api_version, w[0].kind) < (w[1].api_version, w[1].kind))
        );
        for m in msgs.iter() {
            assert!(
                m.fields.windows(2).all(|w| w[0].number < w[1].number),
                "{}",
                m.name
            );
            assert!(
                m.fields.len() <= 128,
                "{} has more fields than the seen-set holds",
                m.name
            );
            for f in m.fields {
                if let Ty::Msg(id) = f.ty {
                    assert!(usize::from(id) < msgs.len());
                }
                if f.flags & INLINE != 0 {
                    assert!(
                        matches!((f.ty, f.card), (Ty::Msg(_), Card::One)),
                        "{}",
                        m.name
                    );
                }
            }
        }
        let pod = kind_message("v1", "Pod").unwrap();
        assert_eq!(pod.name, "k8s.io.api.core.v1.Pod");
        assert_eq!(
            kind_message("apps/v1", "Deployment").unwrap().name,
            "k8s.io.api.apps.v1.Deployment"
        );
        assert!(kind_message("v1", "PodSpec").is_none());
        // The field numbers written by hand in meta.rs and envelope.rs agree
        // with the tables generated from the .proto files.
        let meta = "k8s.io.apimachinery.pkg.apis.meta.v1.";
        for (msg, number, json) in [
            ("ObjectMeta", 1, "name"),
            ("ObjectMeta", 3, "namespace"),
            ("ObjectMeta", 5, "uid"),
            ("ObjectMeta", 6, "resourceVersion"),
            ("ObjectMeta", 7, "generation"),
            ("ObjectMeta", 8, "creationTimestamp"),
            ("ObjectMeta", 9, "deletionTimestamp"),
            ("ObjectMeta", 11, "labels"),
            ("ObjectMeta", 12, "annotations"),
            ("ObjectMeta", 13, "ownerReferences"),
            ("ObjectMeta", 14, "finalizers"),
            ("ObjectMeta", 17, "managedFields"),
            ("OwnerReference", 1, "kind"),
            ("OwnerReference", 3, "name"),
            ("OwnerReference", 4, "uid"),
            ("OwnerReference", 5, "apiVersion"),
            ("OwnerReference", 6, "controller"),
            ("OwnerReference", 7, "blockOwnerDeletion"),
            ("ListMeta", 2, "resourceVersion"),
            ("ListMeta", 3, "continue"),
            ("ListMeta", 4, "remainingItemCount"),
            ("ListMeta", 5, "shardInfo"),
            ("ShardInfo", 1, "selector"),
            ("Status", 1, "metadata"),
            ("Status", 2, "status"),
            ("Status", 3, "message"),
            ("Status", 4, "reason"),
            ("Status", 5, "details"),
            ("Status", 6, "code"),
            ("StatusDetails", 1, "name"),
            ("StatusDetails", 2, "group"),
            ("StatusDetails", 3, "kind"),
            ("StatusDetails", 4, "causes"),
            ("StatusDetails", 5, "retryAfterSeconds"),
            ("StatusDetails", 6, "uid"),
            ("StatusCause", 1, "reason"),
            ("StatusCause", 2, "message"),
            ("StatusCause", 3, "field"),
            ("WatchEvent", 1, "type"),
            ("WatchEvent", 2, "object"),
            ("Time", 1, "seconds"),
            ("Time", 2, "nanos"),
        ] {
            let m = message_named(&format!("{meta}{msg}")).unwrap();
            let mut hint = 0;
            assert_eq!(
                m.field(number, &mut hint).map(|(_, f)| f.json),
                Some(json),
                "{msg}.{number}"
            );
        }
        let runtime = "k8s.io.apimachinery.pkg.runtime.";
        for (msg, number, json) in [
            ("Unknown", 1, "typeMeta"),
            ("Unknown", 2, "raw"),
            ("Unknown", 3, "contentEncoding"),
            ("Unknown", 4, "contentType"),
            ("TypeMeta", 1, "apiVersion"),
            ("TypeMeta", 2, "kind"),
            ("RawExtension", 1, "raw"),
        ] {
            let m = message_named(&format!("{runtime}{msg}")).unwrap();
            let mut hint = 0;
            assert_eq!(
                m.field(number, &mut hint).map(|(_, f)| f.json),
                Some(json),
                "{msg}.{number}"
            );
        }
        let om = message_named("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta").unwrap();
        let mut hint = 0;
        assert_eq!(om.field(17, &mut hint).unwrap().1.json, "managedFields");
        assert_eq!(om.field(1, &mut hint).unwrap().1.json, "name");
        assert!(om.field(15, &mut hint).is_none());
    }
}
