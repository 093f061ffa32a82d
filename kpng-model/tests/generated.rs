//! The generated code in `src/generated/` is what the `.proto` files
//! give. It is regenerated here (protox, tonic-prost-build and
//! pbjson-build are dev-dependencies, so building the crate compiles no
//! protobuf) and compared; after a change to the `.proto` files,
//! `KPNG_BLESS=1 cargo test -p kpng-model --test generated` rewrites it.

use std::path::{Path, PathBuf};

use prost::Message as _;

/// The generated files.
const FILES: [&str; 2] = ["kpng.model.v1.rs", "kpng.model.v1.serde.rs"];

/// Generates the code into `out`, as the checked-in files hold it.
fn generate(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(
        ["kpng/model/v1/model.proto", "kpng/model/v1/watch.proto"],
        [root.join("proto")],
    )?;
    let descriptors = fds.encode_to_vec();
    let mut config = tonic_prost_build::configure().out_dir(out);
    // Content equality and hashing cost no allocation: that is what lets
    // the store skip no-op writes. prost derives `Eq` and `Hash` itself for
    // the simple messages; these two it leaves out (they nest repeated
    // messages). A test in `lib.rs` pins all of them.
    for message in [".kpng.model.v1.Service", ".kpng.model.v1.Endpoint"] {
        config = config.message_attribute(message, "#[derive(Eq, Hash)]");
    }
    // Address sets most Services leave empty are boxed: 8 bytes each
    // instead of 48 inline (at 10k Services, 1.6 MB of a node proxy's
    // heap). The ClusterIPs, which nearly every Service has, stay inline.
    for field in [
        ".kpng.model.v1.Service.external_ips",
        ".kpng.model.v1.Service.load_balancer_ips",
        ".kpng.model.v1.Service.load_balancer_proxy_ips",
        ".kpng.model.v1.Service.load_balancer_source_ranges",
    ] {
        config = config.boxed(field);
    }
    config.compile_fds(fds)?;
    pbjson_build::Builder::new()
        .out_dir(out)
        .register_descriptors(&descriptors)?
        .build(&[".kpng.model.v1"])?;
    // The `Enls` service's client and server need tonic: behind the crate's
    // `grpc` feature.
    let messages = out.join(FILES[0]);
    let text = std::fs::read_to_string(&messages)?;
    let gated = text
        .replace(
            "pub mod enls_client {",
            "#[cfg(feature = \"grpc\")]\npub mod enls_client {",
        )
        .replace(
            "pub mod enls_server {",
            "#[cfg(feature = \"grpc\")]\npub mod enls_server {",
        );
    std::fs::write(&messages, gated)?;
    Ok(())
}

#[test]
fn the_checked_in_code_is_what_the_proto_files_generate() {
    let out: PathBuf = std::env::temp_dir().join(format!("kpng-model-gen-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("out dir");
    let generated = generate(&out);
    let fresh: Vec<String> = FILES
        .iter()
        .map(|f| std::fs::read_to_string(out.join(f)).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&out);
    generated.expect("the .proto files compile");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated");
    let bless = std::env::var_os("KPNG_BLESS").is_some();
    for (file, fresh) in FILES.iter().zip(fresh) {
        assert!(!fresh.is_empty(), "{file}: nothing generated");
        let path = dir.join(file);
        if bless {
            std::fs::create_dir_all(&dir).expect("generated dir");
            std::fs::write(&path, &fresh).expect("write");
            continue;
        }
        let held = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            held == fresh,
            "{} is not what the .proto files generate: run \
             KPNG_BLESS=1 cargo test -p kpng-model --test generated",
            path.display()
        );
    }
}
