//! The process-wide stop signal, shared by `serve` and the demo's `--keep-running`.
//!
//! Its own module so that the command line and the testbed both depend on it rather than on each
//! other: `cli` calls into `testbed::demo`, never the reverse.

/// Resolves on SIGTERM (Kubernetes) or SIGINT (Ctrl-C).
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::SignalKind;
        match tokio::signal::unix::signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown signal received");
}
