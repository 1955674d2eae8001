//! Protobuf `Timestamp {seconds, nanos}` to the RFC 3339 text the
//! apiserver writes in JSON: `Time` with whole seconds
//! (`2006-01-02T15:04:05Z`), `MicroTime` with microseconds
//! (`2006-01-02T15:04:05.000000Z`), both in UTC.

/// A formatted timestamp, on the stack.
pub(crate) struct TimeText {
    buf: [u8; 40],
    len: usize,
}

impl TimeText {
    fn byte(&mut self, c: u8) {
        self.buf[self.len] = c;
        self.len += 1;
    }
    fn digits(&mut self, v: u32, width: usize) {
        let mut n = v;
        for i in (0..width).rev() {
            self.buf[self.len + i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.len += width;
    }
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII digits, '-', ':', 'T', '.', 'Z' are written.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (the civil-from-days algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Seconds of the Unix epoch covered: years 0000 to 9999, the range Go's
/// RFC 3339 formatting writes with four digits and every parser reads.
const MIN_SECONDS: i64 = -62_167_219_200; // 0000-01-01T00:00:00Z
const MAX_SECONDS: i64 = 253_402_300_799; // 9999-12-31T23:59:59Z

/// Formats `seconds` (+ `micros` when given) as RFC 3339 in UTC; `None`
/// outside years 0000-9999.
pub(crate) fn format(seconds: i64, micros: Option<u32>) -> Option<TimeText> {
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
        return None;
    }
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400) as u32;
    let (y, mo, d) = civil_from_days(days);
    let mut t = TimeText {
        buf: [0; 40],
        len: 0,
    };
    t.digits(y as u32, 4);
    t.byte(b'-');
    t.digits(mo, 2);
    t.byte(b'-');
    t.digits(d, 2);
    t.byte(b'T');
    t.digits(secs / 3600, 2);
    t.byte(b':');
    t.digits(secs / 60 % 60, 2);
    t.byte(b':');
    t.digits(secs % 60, 2);
    if let Some(us) = micros {
        t.byte(b'.');
        t.digits(us.min(999_999), 6);
    }
    t.byte(b'Z');
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_go() {
        assert_eq!(format(0, None).unwrap().as_str(), "1970-01-01T00:00:00Z");
        assert_eq!(
            format(1_795_947_342, None).unwrap().as_str(),
            "2026-11-29T10:15:42Z"
        );
        assert_eq!(
            format(1_795_947_342, Some(1234)).unwrap().as_str(),
            "2026-11-29T10:15:42.001234Z"
        );
        assert_eq!(
            format(951_782_400, None).unwrap().as_str(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format(-1, Some(999_999)).unwrap().as_str(),
            "1969-12-31T23:59:59.999999Z"
        );
        assert_eq!(
            format(MIN_SECONDS, None).unwrap().as_str(),
            "0000-01-01T00:00:00Z"
        );
        assert_eq!(
            format(MAX_SECONDS, None).unwrap().as_str(),
            "9999-12-31T23:59:59Z"
        );
        assert!(format(MAX_SECONDS + 1, None).is_none());
        assert!(format(i64::MIN, None).is_none());
    }

    #[test]
    fn agrees_with_jiff_on_many_instants() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (x % (MAX_SECONDS - MIN_SECONDS) as u64) as i64 + MIN_SECONDS;
            let text = format(s, None).unwrap();
            let ts: k8s_openapi::jiff::Timestamp = text.as_str().parse().unwrap();
            assert_eq!(ts.as_second(), s, "{}", text.as_str());
        }
    }
}
