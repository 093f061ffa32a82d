//! The manifest parser and translator never panic, whatever the file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(objects) = kpng_kube::file::parse_str("fuzz.yaml", text) {
            let mut ingest = kpng_kube::Ingest::new(
                kpng_store::Store::new(),
                kpng_kube::IngestConfig::default(),
            );
            ingest.load(&objects);
        }
    }
});
