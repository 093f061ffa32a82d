//! Compiles `proto/kpng/model/v1/model.proto` in pure Rust (protox), so a
//! fresh machine needs no system `protoc`.

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(
        ["kpng/model/v1/model.proto", "kpng/model/v1/watch.proto"],
        ["proto"],
    )?;
    let descriptors = fds.encode_to_vec();

    // Content equality and hashing cost no allocation: that is what lets the
    // store skip no-op writes. prost derives `Eq` and `Hash` itself for the
    // simple messages; these two it leaves out (they nest repeated
    // messages), so derive them here. A test in `lib.rs` pins all of them.
    let eq_hash = [".kpng.model.v1.Service", ".kpng.model.v1.Endpoint"];
    // Address sets most Services leave empty are boxed: 8 bytes each
    // instead of 48 inline (at 10k Services, 1.6 MB of a node proxy's
    // heap). The ClusterIPs, which nearly every Service has, stay inline.
    let boxed = [
        ".kpng.model.v1.Service.external_ips",
        ".kpng.model.v1.Service.load_balancer_ips",
        ".kpng.model.v1.Service.load_balancer_proxy_ips",
        ".kpng.model.v1.Service.load_balancer_source_ranges",
    ];
    #[cfg(feature = "grpc")]
    {
        // The `Enls` service's client and server too (tonic).
        let mut config = tonic_prost_build::configure();
        for message in eq_hash {
            config = config.message_attribute(message, "#[derive(Eq, Hash)]");
        }
        for field in boxed {
            config = config.boxed(field);
        }
        config.compile_fds(fds)?;
    }
    #[cfg(not(feature = "grpc"))]
    {
        let mut config = prost_build::Config::new();
        for message in eq_hash {
            config.message_attribute(message, "#[derive(Eq, Hash)]");
        }
        for field in boxed {
            config.boxed(field);
        }
        config.compile_fds(fds)?;
    }

    pbjson_build::Builder::new()
        .register_descriptors(&descriptors)?
        .build(&[".kpng.model.v1"])?;
    Ok(())
}
