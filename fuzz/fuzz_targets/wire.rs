//! Messages from an untrusted peer (an API server, an agent) decode or are
//! refused, and their conversions to ops never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use prost::Message;

use kpng_model::v1::{EnlsChanges, GlobalEvent, ViewChanges, WatchEvent, WatchRequest};

fuzz_target!(|data: &[u8]| {
    let _ = WatchRequest::decode(data);
    if let Ok(event) = WatchEvent::decode(data) {
        if let Some(kpng_model::v1::watch_event::Event::Changes(changes)) = event.event {
            decode(changes);
        }
    }
    if let Ok(changes) = ViewChanges::decode(data) {
        for change in changes.changes.clone() {
            let _ = kpng_api::codec::wire::from_wire(change);
        }
        decode(changes);
    }
    if let Ok(changes) = EnlsChanges::decode(data) {
        for change in changes.changes {
            let _ = kpng_model::entries::from_wire(change);
        }
    }
    let _ = GlobalEvent::decode(data);
});

/// A batch through the compact decoder (round tables, indices, byte
/// addresses), twice: the second batch refers to the first one's tables.
fn decode(changes: ViewChanges) {
    let mut decoder = kpng_api::codec::compact::Decoder::new();
    let _ = decoder.batch::<kpng_model::Error>(changes.clone(), |_| Ok(()));
    let _ = decoder.batch::<kpng_model::Error>(changes, |_| Ok(()));
}
