//! Unit tests of the object internals (the metadata string block).

use super::metadata::{MetaStrings, Part};

#[test]
fn parts_read_back_from_one_buffer() {
    let m = MetaStrings::new(
        Some("prod"),
        "web-0",
        [
            Some("u-1"),
            Some("42"),
            None,
            Some(""),
            Some("2026-01-01T00:00:00Z"),
        ],
    )
    .unwrap();
    assert_eq!(m.key(), "prod/web-0");
    assert_eq!((m.namespace(), m.name()), (Some("prod"), "web-0"));
    assert_eq!(m.part(Part::Uid), Some("u-1"));
    assert_eq!(m.part(Part::ResourceVersion), Some("42"));
    assert_eq!(m.part(Part::ApiVersion), None, "absent");
    assert_eq!(m.part(Part::Kind), Some(""), "present and empty");
    assert_eq!(
        m.part(Part::DeletionTimestamp),
        Some("2026-01-01T00:00:00Z")
    );
    assert_eq!(m.heap_size(), "prod/web-0u-1422026-01-01T00:00:00Z".len());
}

#[test]
fn cluster_scoped_and_empty_namespace_have_the_name_as_key() {
    for ns in [None, Some("")] {
        let m = MetaStrings::new(ns, "node-1", [None; 5]).unwrap();
        assert_eq!(
            (m.key(), m.name(), m.namespace()),
            ("node-1", "node-1", None)
        );
        assert_eq!(m.part(Part::Uid), None);
    }
    let d = MetaStrings::default();
    assert_eq!((d.key(), d.name(), d.namespace()), ("", "", None));
}
