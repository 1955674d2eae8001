//! The shape of the field tables `cargo xtask codegen` writes into
//! `generated/tables.rs`: per protobuf message, field number -> JSON name, type,
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
        for (msg, number, json) in [
            ("apis.meta.v1.ObjectMeta", 1, "name"),
            ("apis.meta.v1.ObjectMeta", 3, "namespace"),
            ("apis.meta.v1.ObjectMeta", 5, "uid"),
            ("apis.meta.v1.ObjectMeta", 6, "resourceVersion"),
            ("apis.meta.v1.ObjectMeta", 7, "generation"),
            ("apis.meta.v1.ObjectMeta", 8, "creationTimestamp"),
            ("apis.meta.v1.ObjectMeta", 9, "deletionTimestamp"),
            ("apis.meta.v1.ObjectMeta", 11, "labels"),
            ("apis.meta.v1.ObjectMeta", 12, "annotations"),
            ("apis.meta.v1.ObjectMeta", 13, "ownerReferences"),
            ("apis.meta.v1.ObjectMeta", 14, "finalizers"),
            ("apis.meta.v1.ObjectMeta", 17, "managedFields"),
            ("apis.meta.v1.OwnerReference", 1, "kind"),
            ("apis.meta.v1.OwnerReference", 3, "name"),
            ("apis.meta.v1.OwnerReference", 4, "uid"),
            ("apis.meta.v1.OwnerReference", 5, "apiVersion"),
            ("apis.meta.v1.OwnerReference", 6, "controller"),
            ("apis.meta.v1.OwnerReference", 7, "blockOwnerDeletion"),
            ("apis.meta.v1.ListMeta", 2, "resourceVersion"),
            ("apis.meta.v1.ListMeta", 3, "continue"),
            ("apis.meta.v1.ListMeta", 4, "remainingItemCount"),
            ("apis.meta.v1.ListMeta", 5, "shardInfo"),
            ("apis.meta.v1.ShardInfo", 1, "selector"),
            ("apis.meta.v1.Status", 1, "metadata"),
            ("apis.meta.v1.Status", 2, "status"),
            ("apis.meta.v1.Status", 3, "message"),
            ("apis.meta.v1.Status", 4, "reason"),
            ("apis.meta.v1.Status", 5, "details"),
            ("apis.meta.v1.Status", 6, "code"),
            ("apis.meta.v1.StatusDetails", 1, "name"),
            ("apis.meta.v1.StatusDetails", 2, "group"),
            ("apis.meta.v1.StatusDetails", 3, "kind"),
            ("apis.meta.v1.StatusDetails", 4, "causes"),
            ("apis.meta.v1.StatusDetails", 5, "retryAfterSeconds"),
            ("apis.meta.v1.StatusDetails", 6, "uid"),
            ("apis.meta.v1.StatusCause", 1, "reason"),
            ("apis.meta.v1.StatusCause", 2, "message"),
            ("apis.meta.v1.StatusCause", 3, "field"),
            ("apis.meta.v1.WatchEvent", 1, "type"),
            ("apis.meta.v1.WatchEvent", 2, "object"),
            ("apis.meta.v1.Time", 1, "seconds"),
            ("apis.meta.v1.Time", 2, "nanos"),
            ("runtime.Unknown", 1, "typeMeta"),
            ("runtime.Unknown", 2, "raw"),
            ("runtime.Unknown", 3, "contentEncoding"),
            ("runtime.Unknown", 4, "contentType"),
            ("runtime.TypeMeta", 1, "apiVersion"),
            ("runtime.TypeMeta", 2, "kind"),
            ("runtime.RawExtension", 1, "raw"),
        ] {
            let m = message_named(&format!("k8s.io.apimachinery.pkg.{msg}")).unwrap();
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
