//! The watch stream path: newline framing of arbitrary chunks, then the
//! decode of each frame as a watch event.
//!
//! Checks, besides "never panics": the frames are exactly the non-blank,
//! whitespace-trimmed lines of the input whatever the chunk boundaries (in
//! both the exact-copy and zero-copy modes), and a decoded object's key is
//! `namespace/name` of the object it came from.

use bytes::Bytes;
use kcache_core::ObjectOptions;
use kcache_reflector::{EventDecoder, LineFramer, WatchEvent};

/// The reference framing: split on `\n`, trim ASCII whitespace, drop blanks.
fn model(input: &[u8]) -> Vec<&[u8]> {
    input
        .split(|b| *b == b'\n')
        .map(|l| l.trim_ascii())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Frames `input` pushed in chunks whose sizes come from `sizes`.
fn frame(mut framer: LineFramer, input: &[u8], sizes: &[u8]) -> Result<Vec<Bytes>, ()> {
    let mut out = Vec::new();
    let mut rest = input;
    let mut i = 0;
    while !rest.is_empty() {
        let n = match sizes.get(i % sizes.len().max(1)) {
            Some(&s) => usize::from(s).max(1),
            None => rest.len(),
        };
        i += 1;
        let n = n.min(rest.len());
        framer.push(Bytes::copy_from_slice(&rest[..n]));
        rest = &rest[n..];
        while let Some(f) = framer.next_frame().map_err(|_| ())? {
            out.push(f);
        }
    }
    if let Some(f) = framer.finish() {
        out.push(f);
    }
    Ok(out)
}

/// The target's check: panics when a property does not hold.
pub fn check(data: &[u8]) {
    // First byte: how many chunk-size bytes follow; then the stream.
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let k = usize::from(k % 8).min(rest.len());
    let (sizes, input) = rest.split_at(k);
    let want = model(input);

    for framer in [LineFramer::new(), LineFramer::new().zero_copy()] {
        let got = frame(framer, input, sizes).expect("input is far below the default limit");
        let got: Vec<&[u8]> = got.iter().map(|b| &b[..]).collect();
        assert_eq!(got, want, "framing differs from the line model");
    }
    // A tiny limit: errors are fine, panics are not; frames stay in bounds.
    if let Ok(frames) = frame(LineFramer::with_max_frame(16), input, sizes) {
        for f in frames {
            assert!(
                f.len() <= 16,
                "frame of {} bytes passed a 16-byte limit",
                f.len()
            );
        }
    }

    let decoder = EventDecoder::<serde_json::Value>::new(ObjectOptions::default(), None, None);
    let strict = EventDecoder::<serde_json::Value>::new(
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
        Some("ConfigMap"),
        Some("v1"),
    );
    for line in want {
        for d in [&decoder, &strict] {
            let obj = match d.decode_event(Bytes::copy_from_slice(line)) {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => o,
                Ok(_) | Err(_) => continue,
            };
            let expected = match obj.namespace() {
                Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.name()),
                _ => obj.name().to_owned(),
            };
            assert_eq!(obj.key(), expected);
            // The kept bytes are still one JSON document.
            if let Err(e) = crate::json_text(obj.bytes()) {
                panic!(
                    "cached bytes are not JSON ({e}): {}",
                    crate::preview(obj.bytes())
                );
            }
        }
    }
}
