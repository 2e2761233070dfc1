//! `tokenmeter sim`: a simulated vLLM replica.

/// Command-line arguments of `tokenmeter sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {}

/// Runs the simulated replica until interrupted.
pub async fn run(_args: SimArgs) -> Result<(), crate::BoxError> {
    Err("sim: not built yet".into())
}
