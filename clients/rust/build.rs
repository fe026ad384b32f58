//! Generates the mlxgrpc.v1 messages and the InferenceService client from
//! ../../protos at build time (prost + tonic), with the protoc binary shipped in
//! the `protoc-bin-vendored` crate. Nothing generated is checked in.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest.join("../../protos");
    let protos = [
        "mlxgrpc/v1/generation.proto",
        "mlxgrpc/v1/model.proto",
        "mlxgrpc/v1/lifecycle.proto",
        "mlxgrpc/v1/speech.proto",
        "mlxgrpc/v1/inference_service.proto",
    ]
    .map(|p| proto_root.join(p));

    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded at this point.
    unsafe { std::env::set_var("PROTOC", protoc) };

    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .compile_protos(&protos, std::slice::from_ref(&proto_root))?;

    println!(
        "cargo:rerun-if-changed={}",
        proto_root.join("mlxgrpc/v1").display()
    );
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    Ok(())
}
