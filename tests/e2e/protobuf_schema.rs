//! `src/metrics/proto/io.prometheus.client.rs` is prost's code for the official
//! `io.prometheus.client` schema (`src/metrics/proto/metrics.proto`, client_model 0.3.0 as Debian
//! ships it in golang-github-prometheus-client-model-dev: the version of Prometheus 2.42, with the
//! native histogram fields). It is generated, not written: this test compiles the .proto with
//! protox (pure Rust, no protoc) and prost-build and requires the checked-in file to be exactly
//! what they produce. After changing the .proto:
//!
//!     TOKENMETER_REGENERATE_PROTO=1 cargo test --test e2e protobuf_schema::
use std::path::Path;

#[test]
fn the_checked_in_code_is_what_prost_generates_from_the_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/metrics/proto");
    let schema = protox::compile(["metrics.proto"], [&root]).expect("metrics.proto compiles");
    let out = std::env::temp_dir().join(format!("tokenmeter-proto-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("temp dir");
    prost_build::Config::new()
        .out_dir(&out)
        .compile_fds(schema)
        .expect("prost-build generates");
    let generated =
        std::fs::read_to_string(out.join("io.prometheus.client.rs")).expect("generated file");
    let _ = std::fs::remove_dir_all(&out);
    let checked_in_path = root.join("io.prometheus.client.rs");
    if std::env::var_os("TOKENMETER_REGENERATE_PROTO").is_some() {
        std::fs::write(&checked_in_path, &generated).expect("write the generated code");
        return;
    }
    let checked_in = std::fs::read_to_string(&checked_in_path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is not what prost generates from metrics.proto; regenerate it with \
         TOKENMETER_REGENERATE_PROTO=1 cargo test --test e2e protobuf_schema::",
        checked_in_path.display()
    );
}
