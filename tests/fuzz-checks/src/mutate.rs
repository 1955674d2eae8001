//! Deterministic mutations for the smoke: a seeded generator and the
//! mutations libFuzzer's own are made of (bit flips, interesting bytes and
//! integers, truncations, deletions, insertions, duplications, splices),
//! with a dictionary of the tokens that matter to JSON and to the snapshot
//! format.

/// splitmix64: small, fast, and the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Tokens inserted or written over the input: JSON structure, escapes,
/// invalid UTF-8, the members a list and an object are read by.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b" ",
    b"\n",
    b"\\\"",
    b"\\u0000",
    b"\\ud800",
    b"\\u005d",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"null",
    b"true",
    b"-0",
    b"1e999",
    b"12.5e3",
    b"[]",
    b"{}",
    b"\"\"",
    b"\"items\"",
    b"\"it\\u0065ms\"",
    b"\"metadata\"",
    b"\"name\"",
    b"\"namespace\"",
    b"\"resourceVersion\"",
    b"\"continue\"",
    b"\"managedFields\"",
    b"\"kind\"",
    b"{\"metadata\":{\"name\":\"x\"}}",
    b"KCSNEND\n",
    b"\x89KCSNAP\n",
];

/// Integers written over 4 bytes (little-endian): the lengths and limits
/// a length-prefixed format is read by.
const U32S: &[u32] = &[
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x1_0000,
    0xf_ffff,
    0x10_0000,
    0x10_0001,
    0x100_0000,
    0x7fff_ffff,
    0x8000_0000,
    u32::MAX - 1,
    u32::MAX,
];

const U64S: &[u64] = &[
    0,
    1,
    8,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    u64::MAX - 1,
    u64::MAX,
];

/// Inputs grow no larger than this (libFuzzer's default is 4 KiB).
pub const MAX_LEN: usize = 64 * 1024;

fn span(rng: &mut Rng, len: usize) -> (usize, usize) {
    let start = rng.below(len + 1);
    let n = rng.below((len - start).min(64) + 1);
    (start, start + n)
}

/// `input` with one to four mutations applied; `other` is another corpus
/// entry to splice with.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(11) {
            // flip one bit
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            // one byte set to a byte of a token
            1 if len > 0 => {
                let i = rng.below(len);
                let t = rng.pick(TOKENS);
                out[i] = t[rng.below(t.len())];
            }
            // insert a token
            2 => {
                let i = rng.below(len + 1);
                let t = rng.pick(TOKENS);
                out.splice(i..i, t.iter().copied());
            }
            // delete a range
            3 => {
                let (a, b) = span(rng, len);
                out.drain(a..b);
            }
            // duplicate a range somewhere
            4 => {
                let (a, b) = span(rng, len);
                let copy = out[a..b].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
            // truncate
            5 => out.truncate(rng.below(len + 1)),
            // splice: a prefix of this input, a suffix of another
            6 => {
                out.truncate(rng.below(len + 1));
                let from = rng.below(other.len() + 1);
                out.extend_from_slice(&other[from..]);
            }
            // an interesting u32 over 4 bytes
            7 if len >= 4 => {
                let i = rng.below(len - 3);
                out[i..i + 4].copy_from_slice(&rng.pick(U32S).to_le_bytes());
            }
            // an interesting u64 over 8 bytes
            8 if len >= 8 => {
                let i = rng.below(len - 7);
                out[i..i + 8].copy_from_slice(&rng.pick(U64S).to_le_bytes());
            }
            // random bytes inserted
            9 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(i..i, bytes);
            }
            // a random byte replaced
            _ if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next_u64() as u8;
            }
            _ => out.push(rng.next_u64() as u8),
        }
    }
    out.truncate(MAX_LEN);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let input = br#"{"metadata":{"resourceVersion":"1"},"items":[{"a":1}]}"#;
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..100)
                .map(|_| mutate(&mut rng, input, b"other"))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        // and they do change the input
        assert!(run(7).iter().filter(|m| m[..] != input[..]).count() > 90);
    }
}
