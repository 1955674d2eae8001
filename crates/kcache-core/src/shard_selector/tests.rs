//! Tests of the shard selectors: the hash, rendering and parsing against
//! the apiserver's syntax, ranges, splits and slots.

use super::*;
use crate::{CachedObject, Metadata};

fn meta(json: &str) -> Metadata {
    CachedObject::<()>::from_bytes(json.as_bytes().to_vec())
        .unwrap()
        .meta()
        .clone()
}

#[test]
fn fnv1a_known_vectors() {
    // FNV-1a 64 test vectors (Fowler/Noll/Vo reference, and Go's hash/fnv tests)
    assert_eq!(shard_hash(b""), 0xcbf29ce484222325);
    assert_eq!(shard_hash(b"a"), 0xaf63dc4c8601ec8c);
    assert_eq!(shard_hash(b"ab"), 0x089c4407b545986a);
    assert_eq!(shard_hash(b"abc"), 0xe71fa2190541574b);
    assert_eq!(shard_hash(b"foobar"), 0x85944171f73967e8);
}

#[test]
fn field_values_and_empty_namespace() {
    let m = meta(r#"{"metadata":{"name":"n","namespace":"prod","uid":"u-1"}}"#);
    assert_eq!(ShardField::Uid.value(&m), "u-1");
    assert_eq!(ShardField::Namespace.value(&m), "prod");
    assert_eq!(ShardField::Namespace.hash(&m), shard_hash(b"prod"));
    // cluster-scoped, or namespace "" in the JSON: the apiserver hashes ""
    for json in [
        r#"{"metadata":{"name":"n"}}"#,
        r#"{"metadata":{"name":"n","namespace":""}}"#,
    ] {
        assert_eq!(ShardField::Namespace.hash(&meta(json)), 0xcbf29ce484222325);
    }
}

#[test]
fn renders_the_apiserver_syntax() {
    let halves = ShardSelector::contiguous(ShardField::Uid, 2).unwrap();
    assert_eq!(
        halves[0].to_string(),
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    );
    assert_eq!(
        halves[1].to_string(),
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
    );
    let two = ShardSelector::new(
        ShardField::Namespace,
        [
            ShardRange::new(0xc000_0000_0000_0000, HASH_SPACE_END).unwrap(),
            ShardRange::new(0x10, 0xff).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(
        two.to_string(),
        "shardRange(object.metadata.namespace, '0x0000000000000010', '0x00000000000000ff') || \
         shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"
    );
    assert_eq!(
        halves[0].to_query_value(),
        "shardRange(object.metadata.uid,%20'0x0000000000000000',%20'0x8000000000000000')"
    );
    assert_eq!(
        two.to_query_value(),
        "shardRange(object.metadata.namespace,%20'0x0000000000000010',%20'0x00000000000000ff')\
         %20%7C%7C%20\
         shardRange(object.metadata.namespace,%20'0xc000000000000000',%20'0x10000000000000000')"
    );
}

#[test]
fn parse_round_trips() {
    let slots = ShardSlots::new(16).unwrap();
    let cases = [
        ShardSelector::single(ShardField::Uid, ShardRange::FULL),
        ShardSelector::contiguous(ShardField::Namespace, 3).unwrap()[2].clone(),
        slots.selector(ShardField::Uid, [0, 3, 4, 9, 15]).unwrap(),
    ];
    for sel in cases {
        let text = sel.to_string();
        assert_eq!(ShardSelector::parse(&text).unwrap(), sel, "{text}");
        assert_eq!(text.parse::<ShardSelector>().unwrap().to_string(), text);
    }
    // variants CEL accepts: double quotes, extra whitespace, parentheses
    let loose = " ( shardRange( object . metadata . uid ,\"0x0000000000000000\",'0x8000000000000000' ) )\n||shardRange(object.metadata.uid, '0x9000000000000000', '0x10000000000000000') ";
    let sel = ShardSelector::parse(loose).unwrap();
    assert_eq!(
        sel.to_string(),
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
         shardRange(object.metadata.uid, '0x9000000000000000', '0x10000000000000000')"
    );
}

#[test]
fn parse_rejects_what_the_apiserver_rejects() {
    let bad = [
        ("", "Empty"),
        ("   ", "Empty"),
        (
            "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
            "16 hex digits",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000A')",
            "lowercase",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0X8000000000000000')",
            "'0x' prefix",
        ),
        (
            "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
            "'0x' prefix",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
            "16 hex digits",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x000000000000000000')",
            "16 hex digits",
        ),
        (
            "shardRange(object.metadata.uid, 0x0000000000000000, '0x8000000000000000')",
            "quoted",
        ),
        (
            "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
            "UnsupportedField",
        ),
        (
            "shardRange(metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "UnsupportedField",
        ),
        (
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
            "InvertedRange",
        ),
        (
            "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
            "InvertedRange",
        ),
        (
            "shardRange(object.metadata.uid, '0x9000000000000000', '0x8000000000000000')",
            "InvertedRange",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            "MixedFields",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000001') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
            "Overlapping",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
            "`||`",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000', '0x1')",
            "3 arguments",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000')",
            "`,`",
        ),
        (
            "inRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "only shardRange",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000'",
            "`)`",
        ),
        (
            "shardRange(object.metadata.uid, '0x000000000000000\\0', '0x8000000000000000')",
            "escapes",
        ),
    ];
    for (text, expect) in bad {
        let err = ShardSelector::parse(text).unwrap_err();
        let shown = format!("{err:?} / {err}");
        assert!(shown.contains(expect), "{text:?}: {shown}");
    }
}

#[test]
fn construction_errors() {
    assert_eq!(
        ShardSelector::new(ShardField::Uid, []),
        Err(ShardSelectorError::Empty)
    );
    assert!(matches!(
        ShardRange::new(5, 5),
        Err(ShardSelectorError::InvertedRange { start: 5, end: 5 })
    ));
    assert!(matches!(
        ShardRange::new(0, HASH_SPACE_END + 1),
        Err(ShardSelectorError::EndBeyondHashSpace { .. })
    ));
    let a = ShardRange::new(0, 10).unwrap();
    let b = ShardRange::new(9, 20).unwrap();
    assert_eq!(
        ShardSelector::new(ShardField::Uid, [b, a]),
        Err(ShardSelectorError::Overlapping {
            first: a,
            second: b
        })
    );
    // adjacent is fine
    assert!(ShardSelector::new(ShardField::Uid, [ShardRange::new(10, 20).unwrap(), a]).is_ok());
    let msg = ShardRange::new(9, 3).unwrap_err().to_string();
    assert_eq!(
        msg,
        "shard range [0x0000000000000009, 0x0000000000000003) is empty or inverted: start must be below end"
    );
}

#[test]
fn too_long_selectors_are_rejected_before_the_uri_limit() {
    // a uid range is 79 bytes as a query value (80 with the 2^64 end),
    // " || " 12: 659 ranges fit in 60,000 bytes, 660 do not
    let slots = ShardSlots::new(4096).unwrap();
    let even = |field, n: usize| slots.selector(field, (0..n).map(|i| i * 2));
    for (field, fits) in [(ShardField::Uid, 659), (ShardField::Namespace, 618)] {
        let sel = even(field, fits).unwrap();
        assert_eq!(sel.ranges().len(), fits);
        assert!(sel.to_query_value().len() <= MAX_QUERY_VALUE_LEN);
        match even(field, fits + 1) {
            Err(ShardSelectorError::TooLong { ranges, len }) => {
                assert_eq!(ranges, fits + 1);
                assert!(len > MAX_QUERY_VALUE_LEN);
            }
            other => panic!("{other:?}"),
        }
    }
    // the computed length is the query value's, with and without the 2^64 end
    for sel in [
        even(ShardField::Uid, 659).unwrap(),
        slots.selector(ShardField::Namespace, [1, 4095]).unwrap(),
        slots.selector(ShardField::Uid, [4095]).unwrap(),
    ] {
        let len: usize = sel
            .ranges()
            .iter()
            .map(|r| r.query_len(sel.field()))
            .sum::<usize>()
            + QUERY_SEPARATOR.len() * (sel.ranges().len() - 1);
        assert_eq!(len, sel.to_query_value().len());
    }
    // parse accepts up to the apiserver's own limit
    let long = std::iter::repeat_n(
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')",
        1,
    )
    .chain(std::iter::repeat_n(" ", MAX_SELECTOR_LEN))
    .collect::<String>();
    assert!(matches!(
        ShardSelector::parse(&long),
        Err(ShardSelectorError::Syntax { .. })
    ));
    assert!(ShardSelector::parse(long.trim_end()).is_ok());
}

#[test]
fn boundaries_start_inclusive_end_exclusive() {
    let r = ShardRange::new(0x10, 0x20).unwrap();
    assert!(!r.contains(0x0f));
    assert!(r.contains(0x10));
    assert!(r.contains(0x1f));
    assert!(!r.contains(0x20));
    let last = ShardRange::new(u64::MAX, HASH_SPACE_END).unwrap();
    assert!(last.contains(u64::MAX));
    assert!(!last.contains(u64::MAX - 1));
    assert_eq!(last.width(), 1);
    assert!(ShardRange::FULL.contains(0) && ShardRange::FULL.contains(u64::MAX));
    let sel = ShardSelector::new(
        ShardField::Uid,
        [
            ShardRange::new(0, 1).unwrap(),
            ShardRange::new(100, 200).unwrap(),
            last,
        ],
    )
    .unwrap();
    for (h, inside) in [
        (0, true),
        (1, false),
        (99, false),
        (100, true),
        (199, true),
        (200, false),
        (u64::MAX - 1, false),
        (u64::MAX, true),
    ] {
        assert_eq!(sel.contains(h), inside, "{h:#x}");
    }
}

#[test]
fn contiguous_split_covers_the_space_without_gaps() {
    for n in [1, 2, 3, 7, 8, 100, MAX_SHARDS] {
        let parts = ShardRange::FULL.split(n).unwrap();
        assert_eq!(parts.len(), n);
        assert_eq!(parts[0].start(), 0);
        assert_eq!(parts[n - 1].end(), HASH_SPACE_END);
        for w in parts.windows(2) {
            assert_eq!(w[0].end(), u128::from(w[1].start()));
        }
        let widths: Vec<u128> = parts.iter().map(ShardRange::width).collect();
        let (min, max) = (widths.iter().min().unwrap(), widths.iter().max().unwrap());
        assert!(max - min <= 1, "n={n}: {min}..{max}");
    }
    assert_eq!(
        ShardRange::FULL.split(3).unwrap()[1].to_string(),
        "[0x5555555555555555, 0xaaaaaaaaaaaaaaaa)"
    );
    let small = ShardRange::new(10, 13).unwrap();
    assert_eq!(small.split(3).unwrap().len(), 3);
    for n in [0, 4] {
        assert!(matches!(
            small.split(n),
            Err(ShardSelectorError::InvalidShardCount { .. })
        ));
    }
    assert!(ShardRange::FULL.split(MAX_SHARDS + 1).is_err());
}

#[test]
fn slots_match_the_split_and_merge_adjacent_slots() {
    let slots = ShardSlots::new(12).unwrap();
    let split = ShardRange::FULL.split(12).unwrap();
    for (i, r) in split.iter().enumerate() {
        assert_eq!(slots.range(i).unwrap(), *r);
        assert_eq!(slots.slot_of(r.start()), i);
        assert_eq!(slots.slot_of((r.end() - 1) as u64), i);
    }
    assert_eq!(slots.slot_of(u64::MAX), 11);
    assert!(matches!(
        slots.range(12),
        Err(ShardSelectorError::SlotOutOfRange {
            slot: 12,
            count: 12
        })
    ));
    assert!(slots.selector(ShardField::Uid, [3, 12]).is_err());
    assert_eq!(
        slots.selector(ShardField::Uid, []),
        Err(ShardSelectorError::Empty)
    );

    let sel = slots
        .selector(ShardField::Uid, [5, 0, 11, 1, 10, 1])
        .unwrap();
    let ranges: Vec<String> = sel.ranges().iter().map(ToString::to_string).collect();
    assert_eq!(
        ranges,
        [
            format!("[0x0000000000000000, {:#018x})", split[1].end()),
            split[5].to_string(),
            format!("[{:#018x}, 0x10000000000000000)", split[10].start()),
        ]
    );

    // an owner table: each member's selector holds exactly its slots' hashes
    let owner = |s: usize| ["a", "b", "c"][(s * 7) % 3];
    let by = slots
        .selectors_by_owner(ShardField::Namespace, owner)
        .unwrap();
    // alternating owners over many slots: too many ranges for one request
    let many = ShardSlots::new(4096).unwrap();
    assert!(matches!(
        many.selectors_by_owner(ShardField::Uid, |s| s % 2),
        Err(ShardSelectorError::TooLong { ranges: 2048, .. })
    ));
    assert_eq!(by.len(), 3);
    let total: f64 = by.values().map(ShardSelector::fraction).sum();
    assert!((total - 1.0).abs() < 1e-12);
    for h in (0..1000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
        let expect = owner(slots.slot_of(h));
        for (m, sel) in &by {
            assert_eq!(sel.contains(h), *m == expect, "{h:#x}");
        }
    }
}

#[test]
fn matches_filters_like_the_server() {
    let uid = "0b6a6f49-4b1c-4d25-9a40-8d0f8a3cfb11";
    let m = meta(&format!(
        r#"{{"metadata":{{"name":"n","namespace":"team-a","uid":"{uid}"}}}}"#
    ));
    let h = shard_hash(uid.as_bytes());
    let quarters = ShardSelector::contiguous(ShardField::Uid, 4).unwrap();
    let hits: Vec<bool> = quarters.iter().map(|s| s.matches(&m)).collect();
    assert_eq!(hits.iter().filter(|x| **x).count(), 1);
    assert!(hits[(h >> 62) as usize]);
    assert!(quarters[(h >> 62) as usize].matches_value(uid));
    let ns = ShardSelector::contiguous(ShardField::Namespace, 4).unwrap();
    assert!(ns[(shard_hash(b"team-a") >> 62) as usize].matches(&m));
}
