//! Which format a reflector asks the apiserver for (the formats
//! themselves are in `codec`).

/// The format a reflector asks the apiserver for (set with
/// [`WatchConfig::wire_format`](crate::WatchConfig::wire_format)).
///
/// With [`Auto`](Self::Auto) (the default) the lists, watches and streaming
/// lists of a built-in type (one the apiserver serves as protobuf: see
/// [`kcache_core::protobuf::is_builtin_kind`]) accept
/// `application/vnd.kubernetes.protobuf` with JSON as the fallback, as
/// client-go's generated clients do; those of a custom resource accept
/// `application/cbor` (KEP-4222) with JSON as the fallback, which an
/// apiserver without the `CBORServingAndStorage` gate answers in JSON;
/// metadata-only reflectors and unknown kinds ask for JSON. Whatever was
/// asked, each response is decoded as its `Content-Type` says, and a
/// reflector that was answered in JSON (or refused with `406 Not
/// Acceptable`) asks for JSON from then on.
///
/// ```
/// use kcache_reflector::WireFormat;
/// assert_eq!(WireFormat::default(), WireFormat::Auto);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WireFormat {
    /// Protobuf for built-in types, CBOR for custom resources, JSON for
    /// everything else (the default).
    #[default]
    Auto,
    /// JSON always (e.g. to compare, or behind a proxy that mangles
    /// binary formats).
    Json,
}
