//! What the sample-controller tests share.

/// The verdict of a convergence check that collected what is still off in
/// `bad`: `Ok` when nothing is, else how many are and the first three.
pub fn converged(bad: Vec<String>) -> Result<(), String> {
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} not converged, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(3)]
        ))
    }
}
