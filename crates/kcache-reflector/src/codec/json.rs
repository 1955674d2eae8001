//! JSON (`application/json`), which the apiserver serves for every
//! resource: newline-delimited watch events, list items cut by a
//! structural scan (`split`), and the fallback for any other media type.

use bytes::Bytes;
use kcache_core::Format;

use super::{Target, WireCodec};
use crate::decode::{EventDecoder, JsonPage, ListParser, WatchEvent};
use crate::error::{ApiError, BadEvent};
use crate::framing::{Framer, LineFramer};

/// JSON.
pub(crate) struct Json;

impl<K: 'static> WireCodec<K> for Json {
    fn format(&self) -> Format {
        Format::Json
    }

    fn answers(&self, media_type: &str) -> bool {
        media_type == "application/json"
    }

    fn preferred_for(&self, _: Target<'_>) -> bool {
        true
    }

    fn accept(&self, _watch: bool) -> &'static str {
        "application/json"
    }

    fn is_status(&self, body: &[u8]) -> bool {
        body.first().is_some_and(|b| *b == b'{')
    }

    fn status(&self, http_status: Option<u16>, body: &[u8]) -> ApiError {
        ApiError::from_json_status(http_status, body)
    }

    fn framer(&self, max_frame: usize) -> Box<dyn Framer> {
        Box::new(LineFramer::with_max_frame(max_frame))
    }

    fn list_parser(&self) -> Box<dyn ListParser<K>> {
        Box::new(JsonPage::new())
    }

    fn decode_event(
        &self,
        decoder: &EventDecoder<K>,
        frame: Bytes,
    ) -> Result<WatchEvent<K>, BadEvent> {
        decoder.decode_event(frame)
    }
}
