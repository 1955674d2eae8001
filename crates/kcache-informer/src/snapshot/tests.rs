//! The snapshot format and files, tested without an informer.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kcache_core::protobuf::TypeMeta;
use kcache_core::{CachedObject, Format, ObjectOptions};

use super::file::*;
use super::format::*;
use super::*;

struct Cm;

fn fp() -> Fingerprint {
    Fingerprint {
        cluster_uid: "uid-1".into(),
        server_url: Some("https://127.0.0.1:6443".into()),
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
        metadata_only: false,
        namespace: Some("ns".into()),
        label_selector: Some("app=web".into()),
        field_selector: None,
        shard_selector: None,
        transform_id: None,
        strip_managed_fields: true,
    }
}

fn obj(name: &str, rv: u32) -> CachedObject<Cm> {
    CachedObject::from_bytes(format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"k":"v\u00e9"}}}}"#
    ))
    .unwrap()
}

fn sample() -> (Vec<u8>, Vec<CachedObject<Cm>>) {
    let objects = vec![obj("a", 3), obj("b", 7), obj("c", 9)];
    let mut out = Vec::new();
    let n = encode(&mut out, &fp(), "42", SystemTime::now(), &objects).unwrap();
    assert_eq!(n, out.len() as u64);
    (out, objects)
}

fn load(bytes: &[u8], expected: &Fingerprint) -> Result<Loaded<Cm>, SnapshotError> {
    decode(
        bytes,
        bytes.len() as u64,
        expected,
        &ObjectOptions::default(),
    )
}

#[test]
fn crc64_check_value() {
    let mut c = Crc64::new();
    c.update(b"123456789");
    assert_eq!(c.finish(), 0x995D_C9BB_DF19_39FA);
    // split updates give the same result as one
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut one = Crc64::new();
    one.update(&data);
    let mut parts = Crc64::new();
    for chunk in data.chunks(13) {
        parts.update(chunk);
    }
    assert_eq!(one.finish(), parts.finish());
}

#[test]
fn round_trip() {
    let (bytes, objects) = sample();
    let before = SystemTime::now() - Duration::from_secs(1);
    let loaded = load(&bytes, &fp()).unwrap();
    assert_eq!(loaded.resource_version, "42");
    assert!(loaded.written_at >= before);
    assert_eq!(loaded.objects, objects);
    let keys: Vec<_> = loaded.objects.iter().map(|o| o.key().to_owned()).collect();
    assert_eq!(keys, ["ns/a", "ns/b", "ns/c"]);
    assert_eq!(loaded.objects[1].resource_version(), Some("7"));
}

/// A ConfigMap's protobuf (its own message): name, namespace,
/// resourceVersion, a managedFields entry, data {k: v}.
fn proto_cm(name: &str, rv: &str) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, n: u8, b: &[u8]) {
        out.push(n << 3 | 2);
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    }
    let mut mf = Vec::new();
    field(&mut mf, 1, b"kubectl");
    let mut meta = Vec::new();
    field(&mut meta, 1, name.as_bytes());
    field(&mut meta, 3, b"ns");
    field(&mut meta, 6, rv.as_bytes());
    meta.extend_from_slice(&[17 << 3 | 2, 1, mf.len() as u8]);
    meta.extend_from_slice(&mf);
    let mut entry = Vec::new();
    field(&mut entry, 1, b"k");
    field(&mut entry, 2, b"v");
    let mut cm = Vec::new();
    field(&mut cm, 1, &meta);
    field(&mut cm, 2, &entry);
    cm
}

#[test]
fn objects_come_back_in_their_format() {
    let tm = TypeMeta {
        api_version: "v1",
        kind: "ConfigMap",
    };
    let pb: CachedObject<Cm> = CachedObject::from_protobuf(proto_cm("p", "5"), tm).unwrap();
    // {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "namespace": "ns"}}
    let cbor: CachedObject<Cm> = CachedObject::from_cbor(
        &b"\xd9\xd9\xf7\xa3\x44kind\x49ConfigMap\x4aapiVersion\x42v1\x48metadata\xa2\x44name\x41c\x49namespace\x42ns"[..],
    )
    .unwrap();
    let objects = vec![obj("a", 3), pb.clone(), obj("b", 7), cbor.clone()];
    let mut out = Vec::new();
    encode(&mut out, &fp(), "42", SystemTime::now(), &objects).unwrap();
    let loaded = load(&out, &fp()).unwrap();
    assert_eq!(loaded.objects, objects);
    let formats: Vec<_> = loaded.objects.iter().map(|o| o.format()).collect();
    assert_eq!(
        formats,
        [Format::Json, Format::Protobuf, Format::Json, Format::Cbor]
    );
    assert_eq!(
        loaded.objects[3].bytes(),
        cbor.bytes(),
        "the CBOR as written"
    );
    assert_eq!(loaded.objects[3].key(), "ns/c");
    let back = &loaded.objects[1];
    assert_eq!(back.bytes(), pb.bytes(), "the protobuf as written");
    assert_eq!(back.meta(), pb.meta());
    assert_eq!(back.key(), "ns/p");
    // rebuilt with the informer's options, in its format
    let strip = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    let loaded: Loaded<Cm> = decode(&out[..], out.len() as u64, &fp(), &strip).unwrap();
    let back = &loaded.objects[1];
    assert_eq!(back.format(), Format::Protobuf);
    assert!(back.bytes().len() < pb.bytes().len(), "managedFields cut");
    // a protobuf object of a kind without tables, or an unknown format
    // tag, is a corrupt snapshot (the informer starts cold)
    let n = out.len();
    let kind_at = out.windows(9).position(|w| w == b"ConfigMap").unwrap();
    let mut bad = out.clone();
    bad[kind_at] = b'X';
    let crc = |b: &[u8]| {
        let mut c = Crc64::new();
        c.update(b);
        c.finish()
    };
    let fixed = crc(&bad[..n - 8]);
    bad[n - 8..].copy_from_slice(&fixed.to_le_bytes());
    match load(&bad, &fp()) {
        Err(SnapshotError::Corrupt(m)) => assert!(m.contains("object 1"), "{m}"),
        other => panic!("{other:?}"),
    }
    let header_len = u32::from_le_bytes(out[12..16].try_into().unwrap()) as usize;
    let mut bad = out.clone();
    bad[16 + header_len + 8] = 7;
    let fixed = crc(&bad[..n - 8]);
    bad[n - 8..].copy_from_slice(&fixed.to_le_bytes());
    match load(&bad, &fp()) {
        Err(SnapshotError::Corrupt(m)) => assert!(m.contains("unknown format 7"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn empty_snapshot_round_trips() {
    let mut out = Vec::new();
    encode::<Cm, _>(&mut out, &fp(), "5", SystemTime::now(), &[]).unwrap();
    let loaded = load(&out, &fp()).unwrap();
    assert!(loaded.objects.is_empty());
    assert_eq!(loaded.resource_version, "5");
}

#[test]
fn objects_are_rebuilt_with_the_informer_options() {
    let with_mf: CachedObject<Cm> = CachedObject::from_bytes(
        &br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1","managedFields":[{"manager":"x"}]}}"#[..],
    )
    .unwrap();
    let mut out = Vec::new();
    encode(&mut out, &fp(), "1", SystemTime::now(), &[with_mf]).unwrap();
    let loaded: Loaded<Cm> = decode(
        &out[..],
        out.len() as u64,
        &fp(),
        &ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
    )
    .unwrap();
    assert!(!String::from_utf8_lossy(loaded.objects[0].bytes()).contains("managedFields"));
}

#[test]
fn truncation_at_every_byte_is_rejected() {
    let (bytes, _) = sample();
    for cut in 0..bytes.len() {
        match load(&bytes[..cut], &fp()) {
            Err(SnapshotError::Truncated(_)) => {}
            // a cut inside the header is seen by the header length
            // check before the read: still not a success
            Err(e) => panic!("cut at {cut}: expected Truncated, got {e}"),
            Ok(_) => panic!("cut at {cut} was accepted"),
        }
    }
    // a file that claims more bytes than it has (size from metadata,
    // shorter content) is truncated too
    let short = &bytes[..bytes.len() - 3];
    assert!(matches!(
        decode::<Cm, _>(short, bytes.len() as u64, &fp(), &ObjectOptions::default()),
        Err(SnapshotError::Truncated(_))
    ));
}

#[test]
fn a_header_length_beyond_the_file_is_truncated() {
    // under the header limit, but more than the file holds: refused
    // before a buffer of that size is made (the fuzz smoke's
    // allocation check guards the order: fuzz/corpus/snapshot/
    // regression_header_len_beyond_file)
    let (mut bytes, _) = sample();
    bytes[12..16].copy_from_slice(&(MAX_HEADER - 1).to_le_bytes());
    assert!(matches!(
        load(&bytes, &fp()),
        Err(SnapshotError::Truncated("header"))
    ));
}

#[test]
fn every_single_bit_flip_is_rejected() {
    let (bytes, _) = sample();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            assert!(
                load(&b, &fp()).is_err(),
                "flip of bit {bit} of byte {i} was accepted"
            );
        }
    }
}

#[test]
fn trailing_bytes_are_rejected() {
    let (mut bytes, _) = sample();
    bytes.push(0);
    assert!(matches!(
        load(&bytes, &fp()),
        Err(SnapshotError::Corrupt(_))
    ));
}

#[test]
fn other_format_versions_are_rejected() {
    // version 1 (JSON only, before protobuf objects) and a later one
    for v in [1u32, 2, 4] {
        let (mut bytes, _) = sample();
        bytes[8..12].copy_from_slice(&v.to_le_bytes());
        match load(&bytes, &fp()) {
            Err(e @ SnapshotError::UnsupportedVersion { found }) => {
                assert_eq!(found, v);
                assert_eq!(e.reason(), "version");
                assert!(e.to_string().contains(&format!("version {v}")), "{e}");
                assert!(e.to_string().contains("reads version 3"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        load(b"{\"not\":\"a snapshot\"}", &fp()),
        Err(SnapshotError::NotASnapshot)
    ));
}

#[test]
fn a_different_fingerprint_is_rejected_naming_the_field() {
    let (bytes, _) = sample();
    type Change = Box<dyn Fn(&mut Fingerprint)>;
    let cases: Vec<(&str, Change)> = vec![
        ("cluster", Box::new(|f| f.cluster_uid = "uid-2".into())),
        ("server URL", Box::new(|f| f.server_url = None)),
        ("API group", Box::new(|f| f.group = "apps".into())),
        ("API version", Box::new(|f| f.version = "v2".into())),
        ("resource", Box::new(|f| f.resource = "secrets".into())),
        ("metadata-only", Box::new(|f| f.metadata_only = true)),
        ("namespace", Box::new(|f| f.namespace = None)),
        (
            "label selector",
            Box::new(|f| f.label_selector = Some("app=db".into())),
        ),
        (
            "field selector",
            Box::new(|f| f.field_selector = Some("metadata.name=a".into())),
        ),
        (
            "shard selector",
            Box::new(|f| {
                f.shard_selector = Some(
                    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
                        .into(),
                )
            }),
        ),
        (
            "transform id",
            Box::new(|f| f.transform_id = Some("v1".into())),
        ),
        (
            "strip managedFields",
            Box::new(|f| f.strip_managed_fields = false),
        ),
    ];
    for (name, change) in cases {
        let mut expected = fp();
        change(&mut expected);
        match load(&bytes, &expected) {
            Err(SnapshotError::Mismatch { field, .. }) => assert_eq!(field, name),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn file_names_differ_by_selector_and_are_safe() {
    let a = fp();
    let mut b = fp();
    b.label_selector = Some("app=db".into());
    assert_ne!(a.file_name(), b.file_name());
    let mut shard = fp();
    shard.shard_selector =
        Some("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')".into());
    assert_ne!(a.file_name(), shard.file_name());
    let mut c = fp();
    c.cluster_uid = "another".into();
    assert_eq!(
        a.file_name(),
        c.file_name(),
        "the cluster is checked, not named"
    );
    let mut d = fp();
    d.namespace = Some("../../etc".into());
    d.group = "example.com".into();
    let name = d.file_name();
    assert!(!name.contains('/'), "{name}");
    assert!(
        name.starts_with("configmaps.example.com.v1.ns-.._.._etc."),
        "{name}"
    );
    assert!(name.ends_with(".kcsnap"));
}

/// A fresh folder for one file test (not created).
fn test_dir(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "kcache-snapshot-unit-{test}-{}-{}",
        std::process::id(),
        random_name()
    ))
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn write_errors_are_reported_and_stale_temp_files_removed() {
    let dir = test_dir("err");
    fs::create_dir_all(&dir).unwrap();
    // the folder is a file: the write fails with an I/O error
    let not_a_dir = dir.join("file");
    fs::write(&not_a_dir, b"x").unwrap();
    let err = write_file(&not_a_dir.join("cms.kcsnap"), &fp(), "1", &[obj("a", 1)]).unwrap_err();
    assert_eq!(err.reason(), "io", "{err}");
    assert!(err.to_string().contains("writable"), "{err}");
    // leftovers of a crashed write are removed; other files are not
    let path = dir.join("cms.kcsnap");
    let stale = [
        dir.join(".cms.kcsnap.tmp-1-0"),
        dir.join(".cms.kcsnap.tmp-0123456789abcdef"),
    ];
    for f in &stale {
        fs::write(f, b"half a snapshot").unwrap();
    }
    fs::write(dir.join(".other.kcsnap.tmp-1-0"), b"not ours").unwrap();
    assert_eq!(remove_stale_temp_files(&path), 2);
    assert!(stale.iter().all(|f| !f.exists()));
    assert!(dir.join(".other.kcsnap.tmp-1-0").exists());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn atomic_write_and_read_back() {
    let dir = test_dir("atomic");
    let path = dir.join("sub").join("cms.kcsnap");
    assert!(matches!(
        read_file::<Cm>(&path, &fp(), &ObjectOptions::default()),
        Err(SnapshotError::Missing(_))
    ));
    let objects = vec![obj("a", 1), obj("b", 2)];
    let stats = write_file(&path, &fp(), "2", &objects).unwrap();
    assert_eq!(stats.objects, 2);
    assert_eq!(stats.bytes, fs::metadata(&path).unwrap().len());
    // overwritten in place, no temporary file left behind
    let stats = write_file(&path, &fp(), "3", &objects[..1]).unwrap();
    assert_eq!(stats.objects, 1);
    let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
    assert_eq!(loaded.resource_version, "3");
    assert_eq!(loaded.objects.len(), 1);
    assert_eq!(entries(path.parent().unwrap()), ["cms.kcsnap"]);
    fs::remove_dir_all(&dir).unwrap();
}

/// Files 0600; every folder the write creates 0700.
#[cfg(unix)]
#[test]
fn snapshot_files_are_0600_and_new_folders_0700() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        format!(
            "{:o}",
            fs::metadata(p).unwrap().permissions().mode() & 0o7777
        )
    };
    let dir = test_dir("modes");
    let path = dir.join("a").join("b").join("cms.kcsnap");
    write_file(&path, &fp(), "2", &[obj("a", 1)]).unwrap();
    assert_eq!(mode(&path), "600");
    for d in [dir.clone(), dir.join("a"), dir.join("a/b")] {
        assert_eq!(mode(&d), "700", "{}", d.display());
    }
    // a rewrite is a new file: 0600 again even if the old one was not
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    write_file(&path, &fp(), "3", &[obj("a", 1)]).unwrap();
    assert_eq!(mode(&path), "600");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn temp_names_are_unpredictable() {
    let a = random_name();
    let b = random_name();
    assert_ne!(a, b);
    assert_eq!(a.len(), 16);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
}

/// Names handed out in order, for planting files at the temp path.
fn names(list: &[&str]) -> impl FnMut() -> String {
    let mut it = list
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .into_iter();
    move || it.next().unwrap_or_else(|| "exhausted".to_owned())
}

/// A symlink planted at the temporary file's path (to an existing file,
/// and a dangling one) is not followed: neither target is written or
/// created, the symlinks stay, and the write goes to a fresh name.
#[cfg(unix)]
#[test]
fn a_symlink_planted_at_the_temp_path_is_not_followed() {
    let dir = test_dir("symlink");
    fs::create_dir_all(&dir).unwrap();
    let victim = dir.join("victim");
    fs::write(&victim, b"victim").unwrap();
    let absent = dir.join("absent");
    let planted = dir.join(".cms.kcsnap.tmp-planted");
    let dangling = dir.join(".cms.kcsnap.tmp-dangling");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    std::os::unix::fs::symlink(&absent, &dangling).unwrap();
    // the open itself refuses both
    for link in [&planted, &dangling] {
        let err = create_private(link).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
    }
    let path = dir.join("cms.kcsnap");
    write_file_named(
        &path,
        &fp(),
        "5",
        &[obj("a", 1)],
        names(&["planted", "dangling", "fresh"]),
    )
    .unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"victim");
    assert!(!absent.exists());
    assert!(fs::symlink_metadata(&planted).unwrap().is_symlink());
    assert!(fs::symlink_metadata(&dangling).unwrap().is_symlink());
    let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
    assert_eq!(loaded.resource_version, "5");
    fs::remove_dir_all(&dir).unwrap();
}

/// A regular file planted at the temporary path is neither truncated
/// nor written; when every name tried is taken, the write fails.
#[test]
fn a_file_planted_at_the_temp_path_is_left_alone() {
    let dir = test_dir("planted");
    fs::create_dir_all(&dir).unwrap();
    let planted = dir.join(".cms.kcsnap.tmp-planted");
    fs::write(&planted, b"someone else's").unwrap();
    let path = dir.join("cms.kcsnap");
    write_file_named(&path, &fp(), "5", &[obj("a", 1)], names(&["planted", "x"])).unwrap();
    assert_eq!(fs::read(&planted).unwrap(), b"someone else's");
    assert!(path.exists());
    let err = write_file_named(&path, &fp(), "6", &[obj("a", 1)], || "planted".into()).unwrap_err();
    assert_eq!(err.reason(), "io", "{err}");
    assert_eq!(fs::read(&planted).unwrap(), b"someone else's");
    // the snapshot from before is intact
    let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
    assert_eq!(loaded.resource_version, "5");
    fs::remove_dir_all(&dir).unwrap();
}

/// A symlink at the snapshot's own path is not read through (the start
/// is cold, reason `io`), and the next write replaces the symlink, not
/// its target.
#[cfg(unix)]
#[test]
fn a_symlink_at_the_snapshot_path_is_not_followed() {
    let dir = test_dir("snaplink");
    let real = dir.join("elsewhere.kcsnap");
    write_file(&real, &fp(), "7", &[obj("a", 1)]).unwrap();
    let before = fs::read(&real).unwrap();
    let path = dir.join("cms.kcsnap");
    std::os::unix::fs::symlink(&real, &path).unwrap();
    let err = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap_err();
    assert_eq!(err.reason(), "io", "{err}");
    write_file(&path, &fp(), "8", &[obj("b", 2)]).unwrap();
    assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
    assert_eq!(fs::read(&real).unwrap(), before);
    let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
    assert_eq!(loaded.resource_version, "8");
    fs::remove_dir_all(&dir).unwrap();
}

/// A folder others may write into is reported; 0700 and 0755 are not.
#[cfg(unix)]
#[test]
fn folders_others_can_write_are_detected() {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_dir("loose");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cms.kcsnap");
    for (mode, loose) in [
        (0o700, false),
        (0o755, false),
        (0o775, true),
        (0o777, true),
        (0o1777, true),
    ] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(loose_folder_mode(&path), loose.then_some(mode), "{mode:o}");
    }
    assert_eq!(loose_folder_mode(&test_dir("absent").join("x")), None);
    fs::remove_dir_all(&dir).unwrap();
}

/// Files written before the checksum moved to the `crc` crate (by the
/// hand-written CRC-64/XZ, format version 3: the fuzz seeds) still check:
/// the on-disk format is unchanged.
#[test]
fn snapshots_written_by_the_hand_written_crc_still_check() {
    let seeds: [&[u8]; 3] = [
        include_bytes!("../../../../fuzz/corpus/snapshot/three_objects"),
        include_bytes!("../../../../fuzz/corpus/snapshot/mixed_formats"),
        include_bytes!("../../../../fuzz/corpus/snapshot/empty"),
    ];
    for bytes in seeds {
        let n = bytes.len();
        let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
        let header_end = 16 + header_len;
        let mut c = Crc64::new();
        c.update(&bytes[..header_end]);
        let stored = u64::from_le_bytes(bytes[header_end..header_end + 8].try_into().unwrap());
        assert_eq!(c.finish(), stored, "header checksum");
        let mut c = Crc64::new();
        c.update(&bytes[..n - 8]);
        let stored = u64::from_le_bytes(bytes[n - 8..].try_into().unwrap());
        assert_eq!(c.finish(), stored, "file checksum");
    }
}
