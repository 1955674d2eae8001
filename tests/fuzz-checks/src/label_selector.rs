//! The label selector parser: never panics, and whatever parses prints to a
//! string that parses back to the same selector (and prints the same again).

use kcache_core::Selector;

/// The target's check: panics when a property does not hold.
pub fn check(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(sel) = Selector::parse(s) else {
        return;
    };
    let printed = sel.to_string();
    let again = match Selector::parse(&printed) {
        Ok(a) => a,
        Err(e) => panic!("{s:?} parsed, printed as {printed:?}, which fails: {e}"),
    };
    assert_eq!(sel, again, "{s:?} -> {printed:?} parses differently");
    assert_eq!(again.to_string(), printed, "printing is not stable");
}
