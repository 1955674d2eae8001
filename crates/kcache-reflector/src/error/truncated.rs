//! [`Truncated`]: a bounded `Display` of server-provided text (log lines,
//! error messages).

use std::fmt;

/// Displays at most `.1` bytes of what `.0` displays (cut at a character
/// boundary), then a note of the full length. Nothing beyond the kept part
/// is stored: a message of any size costs at most `.1` bytes to log.
pub(crate) struct Truncated<'a, T: ?Sized>(pub(crate) &'a T, pub(crate) usize);

impl<T: fmt::Display + ?Sized> fmt::Display for Truncated<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Cut {
            kept: String,
            room: usize,
            total: usize,
        }
        impl fmt::Write for Cut {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.total += s.len();
                if self.room > 0 {
                    let mut end = self.room.min(s.len());
                    while !s.is_char_boundary(end) {
                        end -= 1;
                    }
                    self.kept.push_str(&s[..end]);
                    // once something did not fit, keep nothing more
                    self.room = if end < s.len() { 0 } else { self.room - end };
                }
                Ok(())
            }
        }
        let mut cut = Cut {
            kept: String::new(),
            room: self.1,
            total: 0,
        };
        let _ = fmt::Write::write_fmt(&mut cut, format_args!("{}", self.0));
        f.write_str(&cut.kept)?;
        if cut.total > cut.kept.len() {
            write!(f, "... [cut: {} bytes in all]", cut.total)?;
        }
        Ok(())
    }
}
