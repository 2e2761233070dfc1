//! `tokenmeter bench`: the load generator.

/// Command-line arguments of `tokenmeter bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

/// Runs the load described by the arguments and reports.
pub async fn run(_args: BenchArgs) -> Result<(), crate::BoxError> {
    Err("bench: not built yet".into())
}
