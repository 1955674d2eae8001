//! Printing an error with its sources.
//!
//! kcache's errors print a source once in a chain: a message says what
//! happened and what to do, and the underlying error is only reachable
//! through [`std::error::Error::source`]. [`ErrorChain`] prints the whole
//! chain on one line, for logs and for the `last_error` strings kcache keeps.

use std::error::Error as StdError;
use std::fmt;

/// Displays an error followed by each of its sources, joined by `: `.
///
/// A source whose message is already part of the text (some errors outside
/// kcache, such as `kube::Error`, print their source in their message too)
/// is skipped, so nothing is printed twice.
///
/// ```
/// use kcache_core::ErrorChain;
/// #[derive(Debug, thiserror::Error)]
/// #[error("reading the config failed")]
/// struct ReadConfig(#[source] std::io::Error);
///
/// let e = ReadConfig(std::io::Error::other("disk on fire"));
/// assert_eq!(e.to_string(), "reading the config failed");
/// assert_eq!(
///     ErrorChain(&e).to_string(),
///     "reading the config failed: disk on fire"
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = self.0.to_string();
        let mut cur = self.0.source();
        while let Some(e) = cur {
            let m = e.to_string();
            if !m.is_empty() && !out.contains(&m) {
                out.push_str(": ");
                out.push_str(&m);
            }
            cur = e.source();
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
