//! Informer errors.

/// What can go wrong when configuring or running an informer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// A setting that must come before `run` came after it, or `run` was
    /// called twice.
    #[error("`{0}` must be called before the informer starts (and `run` only once)")]
    AlreadyStarted(&'static str),
    /// The informer has stopped; create a new one.
    #[error("the informer has stopped; handlers cannot be added to a stopped informer")]
    Stopped,
    /// A listener thread could not be started.
    #[error("could not start a listener thread (is the process out of threads or memory?)")]
    Thread(#[source] std::io::Error),
}
