//! Bytes from an untrusted client through the server's own connection
//! handling: HTTP/2 after a valid preface, the gRPC framing and decoding
//! of each method's request (see `kpng-api/tests/support/server_input.rs`,
//! which `cargo test -p kpng-api --test server_input` also runs).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../kpng-api/tests/support/server_input.rs"]
mod server_input;

fuzz_target!(|data: &[u8]| {
    let _ = server_input::run(data);
});
